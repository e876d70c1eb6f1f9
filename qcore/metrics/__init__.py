"""Metrics history: its store, recorder, sources and provider. It sits above the core
and uses it only through public verbs and ``qcore.sql`` builders; nothing in the core
imports it (an import-linter contract says so)."""
