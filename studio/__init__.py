"""The Streamlit studio. Pages hold UI only; logic lives in plain functions (services, charts)."""
