"""Leak estimation: robust slopes of memory against requests and time, and the verdict."""
