"""Adapters that run redis-py's and python-redis-lock's own lock tests against RedisLock.

``tests/test_peer_lock_suites.py`` downloads those projects' published source
distributions, puts our ``conftest`` modules next to their test files, and runs them
with their assertions unchanged. The shims here give :class:`RedisLock` the peers'
interfaces, as thinly as a user switching over would.
"""
