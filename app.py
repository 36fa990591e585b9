"""Streamlit entry point (`streamlit run app.py`). The page lives in ``ui/``; the work is done by ``crag``."""

from ui.page import main

main()
