"""Page functions: UI only. (Not named pages/, which Streamlit would list on its own.)"""
