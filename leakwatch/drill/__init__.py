"""Leak drills: inject a known leak into a real server to prove that detection works."""
