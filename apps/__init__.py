"""The Streamlit dashboard, shipped inside the package; ``bertology dashboard`` runs it on 127.0.0.1.
It reads result files only.

- ``dashboard.py``: the Streamlit script (navigation and dispatch over the registry);
- ``pages.py``: the page registry ``PAGES`` (one ``Page`` entry per page) and each page's render function;
- ``tables.py`` (data shaping) and ``figures.py`` (Plotly figures): pure functions of data frames;
- ``ui.py``: run pickers, tables read with a message instead of a traceback;
- ``locations.py``: where the results are and how runs and paths are named on screen;
- ``screenshots.py``: serves the dashboard and drives it in Chromium.
"""
