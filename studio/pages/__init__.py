"""Page functions: UI only."""
