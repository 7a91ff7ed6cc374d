"""The application shell: settings, the command line and the process launcher."""
