"""The compatibility matrix: provisioners, the capability guard, the pytest plugin, the runner."""
