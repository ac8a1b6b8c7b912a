"""The Streamlit dashboard, shipped inside the package; ``bertology dashboard`` runs it on 127.0.0.1.
It reads result files only.

- ``dashboard.py``: the Streamlit script (navigation and dispatch over the registry);
- ``pages/``: one module per page (its render function, the data shaping and figures only it uses, and
  its registry entry ``PAGE``) and, in ``pages/__init__.py``, the registry ``PAGES`` they make up;
- ``tables.py`` (data shaping) and ``figures.py`` (Plotly figures) that several pages share: pure
  functions of data frames;
- ``ui.py``: run pickers, tables read with a message instead of a traceback;
- ``locations.py``: where the results are and how runs and paths are named on screen;
- ``screenshots.py``: serves the dashboard and drives it in Chromium.
"""
