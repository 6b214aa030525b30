"""`leakwatch metrics-record`: the metric lists of the servers we run but did not write, recorded from the real servers."""
