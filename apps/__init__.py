"""The Streamlit dashboard (``dashboard.py``), shipped inside the package; ``bertology dashboard`` runs it
on 127.0.0.1. It reads result files only."""
