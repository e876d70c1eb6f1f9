"""Interoperability with the real pg-boss (Node.js), driven from the tests."""
