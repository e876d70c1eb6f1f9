"""SQL builders: every statement qcore sends, one builder per statement."""
