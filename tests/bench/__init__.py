"""Benchmarks of the orderer (run as scripts) and their smoke test."""
