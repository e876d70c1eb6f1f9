"""The built-in backends.

Each registers in the ``qcore.backends`` entry-point group exactly as a vendor's
package would.
"""
