"""The chat page as Streamlit runs a page of ``st.navigation``: a script, run by ``ui.page.main``."""

from ui.page import chat_page

if __name__ == "__main__":  # run as the page; imported (by a test that walks the modules), it draws nothing
    chat_page()
