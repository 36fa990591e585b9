"""Streamlit entry point (`streamlit run app.py`). The page lives in ``ui/``; the work is done by ``crag``."""

from ui.page import main

# Streamlit runs this file as __main__. A build's parse workers (multiprocessing's spawn) import it again as
# __mp_main__: there it must not draw a page, only let the worker start.
if __name__ == "__main__":
    main()
