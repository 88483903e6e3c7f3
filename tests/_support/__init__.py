"""Helpers shared by test modules (no test module imports another: what two of them need lives here)."""
