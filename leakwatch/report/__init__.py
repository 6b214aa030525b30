"""`leakwatch report`: daily and weekly HTML memory reports."""
