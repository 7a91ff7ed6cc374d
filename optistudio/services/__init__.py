"""Services shared by the workers, the studio and the command line."""
