"""The dashboard (an optional extra): its app, templates and assets.

It sits above the core and metrics and uses them only through public verbs; nothing in
the core imports it (an import-linter contract says so).
"""

from qcore.web.app import create_app
from qcore.web.databases import combine

__all__ = ["combine", "create_app"]
