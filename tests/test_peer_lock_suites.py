"""redis-py's and python-redis-lock's own lock tests, run against :class:`RedisLock`.

Their test files come from their published source distributions (``peer_suites.py``);
our conftests and the shims in ``tests/peer_locks/`` give them our lock behind the
interface they test, as thinly as a user switching over would adapt it. Their
assertions are unchanged: each test passes, or is listed here with the reason it
cannot (the deliberate differences that the table in docs/coming-from.md, section
"redis-py and python-redis-lock", explains).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import redis

from redis_components.embedded import EmbeddedRedis
from tests.peer_suites import check, run_suite, unpack
from tests.processes import ROOT

HERE = Path(__file__).parent / "peer_locks"

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("RC_TEST_CLUSTER")),
    reason="the peers' lock tests build clients of one server (redis.Redis, a unix "
    "socket); they run on the single-server leg",
)

# -- redis-py ----------------------------------------------------------------------------

_KEY = (
    "reads or writes the lock's key by its bare name ('foo': GET, SET, TTL, PEXPIRE); our "
    "lock keeps its token under rc:lock:{name}, beside its wait queue and fence, so a plain "
    "key 'foo' is neither the lock nor a way to take it over"
)
_TOKEN = (
    "gives its own token (token='test'); ours are random ones the library makes, so that no two "
    "holders can ever share one"
)
_SAME_THREAD = (
    "a second Lock object in the same thread or task waits for the first; ours raises "
    "LockAlreadyHeld at once instead of waiting for its own lease (a deadlock guard)"
)
_LEASE = (
    "expects a lock made without a timeout to refuse extend() or reacquire(); every lock "
    "here has a lease (LOCK_TIMEOUT by default), so it can always be extended"
)
_KEEPS = (
    _KEY + "; what it tests, extend() by 0 s or less keeping the lease, is ours too "
    "(tests/test_locks.py checks it on rc:lock:{name})"
)
_NO_EXPIRY = (
    "makes a lock with timeout=0, which redis-py takes as no expiry (its bare key 'foo' has "
    "PTTL -1), so that extend() finds no lease to change and raises LockNotOwnedError; here "
    "timeout=0 takes LOCK_TIMEOUT, as None does: every lock has a lease, which extend() keeps"
)
_NO_EXPIRY_REACQUIRE = (
    "makes a lock with timeout=0, which redis-py takes as no expiry, and expects its bare key "
    "'foo' to hold the token with no TTL (PTTL -1) after reacquire(); here timeout=0 takes "
    "LOCK_TIMEOUT, as None does, and the key is rc:lock:{name}: reacquire() keeps the lock "
    "and restarts its lease"
)
_NAME = (
    _KEY + "; it takes the lock over with SET foo, and the extend it expects to fail succeeds "
    "(our LockNotOwned's lock_name is the lock's name: tests/test_locks.py)"
)
_POLL_SLEEP = (
    _SAME_THREAD + "; and it counts the polling sleeps: ours waits on the grant list without "
    "polling, so acquire(sleep=...) is accepted and changes nothing"
)
# The tests of every version we support (6.4 to 8.2); one that a version lacks is fine there.
_BOTH = {
    "test_lock": _KEY,
    "test_lock_token": _TOKEN,
    "test_lock_token_thread_local_false": _TOKEN,
    "test_timeout": _KEY,
    "test_float_timeout": _KEY,
    "test_blocking_timeout": _SAME_THREAD,
    "test_context_manager": _KEY,
    "test_context_manager_raises_when_locked_not_acquired": _KEY,
    "test_high_sleep_small_blocking_timeout": _SAME_THREAD,
    "test_releasing_lock_no_longer_owned_raises_error": _KEY,
    "test_extend_lock": _KEY,
    "test_extend_lock_replace_ttl": _KEY,
    "test_extend_lock_float": _KEY,
    "test_extending_lock_with_no_timeout_raises_error": _LEASE,
    "test_extending_lock_no_longer_owned_raises_error": _KEY,
    "test_reacquire_lock": _KEY,
    "test_reacquiring_lock_with_no_timeout_raises_error": _LEASE,
    "test_reacquiring_lock_no_longer_owned_raises_error": _KEY,
    "test_lock_error_gives_correct_lock_name": _KEY,
    # New in redis-py 8.2:
    "test_lock_not_owned_error_gives_correct_lock_name": _NAME,
    "test_reacquire_lock_zero_timeout_keeps_lock": _NO_EXPIRY_REACQUIRE,
    "test_extend_lock_zero_additional_time_replace_ttl_raises_error": _NO_EXPIRY,
    "test_extend_lock_zero_timeout_without_replace_raises_error": _NO_EXPIRY,
    "test_extend_lock_zero_timeout_replace_ttl_keeps_existing_ttl": _KEEPS,
    "test_extend_lock_negative_timeout_replace_ttl_keeps_existing_ttl": _KEEPS,
    "test_extend_lock_negative_additional_time_without_replace_keeps_existing_ttl": _KEEPS,
}
_SYNC_ONLY = {
    "test_context_manager_blocking_timeout": _SAME_THREAD,
    "test_context_manager_reacquiring_lock_with_no_timeout_raises_error": _LEASE,
    "test_context_manager_reacquiring_lock_no_longer_owned_raises_error": _KEY,
}
_ASYNC_ONLY = {  # new in redis-py 8.2
    "test_acquire_sleep_overrides_constructor_sleep": _POLL_SLEEP,
    "test_blocking_timeout_sleep_overrides_constructor_sleep": _POLL_SLEEP,
}
REDIS_PY_NOT_APPLICABLE = {
    **{f"redis_py_tests.test_lock.TestLock.{name}": why for name, why in _BOTH.items()},
    **{f"redis_py_tests.test_lock.TestLock.{name}": why for name, why in _SYNC_ONLY.items()},
    **{
        f"redis_py_tests.test_asyncio.test_lock.TestLock.{name}": why
        for name, why in {**_BOTH, **_ASYNC_ONLY}.items()
    },
}


def test_redis_pys_lock_tests_pass_on_our_lock(tmp_path: Path, redis_server: EmbeddedRedis) -> None:
    version = redis.__version__
    suite = unpack(
        "redis",
        version,
        {
            "tests/test_lock.py": "redis_py_tests/test_lock.py",
            "tests/test_asyncio/test_lock.py": "redis_py_tests/test_asyncio/test_lock.py",
        },
    )
    folder = suite / "redis_py_tests"
    for package in (folder, folder / "test_asyncio"):
        (package / "__init__.py").touch()
    shutil.copy(HERE / "redis_py_conftest.py", folder / "conftest.py")
    shutil.copy(HERE / "redis_py_asyncio_conftest.py", folder / "test_asyncio" / "conftest.py")
    outcomes, output = run_suite(
        [folder],
        tmp_path / "report.xml",
        {"RC_TEST_REDIS_URL": redis_server.url},
        ("-o", "filterwarnings=default", "-o", "asyncio_mode=auto", "--confcutdir", str(folder)),
    )
    print(output[-3000:])
    check(
        f"redis-py {version}'s lock tests on RedisLock",
        outcomes,
        REDIS_PY_NOT_APPLICABLE,
        output,
        20,
    )


# -- python-redis-lock -------------------------------------------------------------------

_PRL = "test_redis_lock."
_PRL_KEY = (
    "reads or writes python-redis-lock's own keys ('lock:<name>', 'lock-signal:<name>'); "
    "ours live under rc:lock:{name} with a wait queue and fence beside them"
)
_ID = (
    "acts on a lock through another Lock object given the holder's id; ours are made by "
    "the server at acquisition, and only the handle that acquired a lock releases or "
    "extends it"
)
_RESET = (
    "breaks locks that others hold (reset, reset_all); RedisLock has no way to take a lock "
    "from its holder: a lease ends by itself, or its holder releases it"
)
_PRIVATE = "inspects python-redis-lock's private renewal-thread attributes"
_GREEN = (
    "runs the lock under gevent or eventlet monkey-patching; redis_components does not "
    "support green threads (its lease watchdog is a real thread) and does not install them"
)
_PRL_LEASE = (
    "expects a lock without expire to have no lease (so it cannot be extended or "
    "auto-renewed); every lock here has one (LOCK_TIMEOUT by default)"
)
PRL_NOT_APPLICABLE = {
    _PRL + name: why
    for name, why in {
        "test_upgrade": _PRL_KEY,
        "test_simple[gevent]": _GREEN,
        "test_simple[eventlet]": _GREEN,
        "test_simple_auto_renewal[normal]": "reads the log lines of python-redis-lock's "
        "renewal thread; our leases are renewed by one watchdog thread per process",
        "test_simple_auto_renewal[gevent]": _GREEN,
        "test_simple_auto_renewal[eventlet]": _GREEN,
        "test_timeout": _SAME_THREAD,
        "test_timeout_expire": _SAME_THREAD,
        "test_timeout_expire_with_renewal": _SAME_THREAD,
        "test_expire_without_timeout": _SAME_THREAD,
        "test_expire_less_than_timeout": "expects a wait longer than the lease to be refused "
        "(TimeoutTooLarge); a waiter here may wait longer than any one lease, since the "
        "holder's release or expiry hands the lock on",
        "test_extend": _PRL_KEY,
        "test_extend_lock_default_expire": _PRL_KEY,
        "test_extend_lock_without_expire_fail": _PRL_LEASE,
        "test_auto_renewal_bad_values": _PRL_LEASE,
        "test_extend_another_instance": _ID,
        "test_extend_another_instance_different_id_fail": _ID,
        "test_given_id": _ID,
        "test_owner_id": _ID,
        "test_locked_method": _ID,
        "test_bogus_release": _ID,
        "test_token": _PRL_KEY,
        "test_reset": _RESET,
        "test_reset_all": _RESET,
        "test_reset_signalizes": _RESET,
        "test_reset_all_signalizes": _RESET,
        "test_signal_expiration": _PRL_KEY + "; and breaks held locks (reset_all)",
        "test_release_from_nonblocking_leaving_garbage": _PRL_KEY,
        "test_no_auto_renewal": _PRIVATE,
        "test_auto_renewal": _PRIVATE,
        "test_auto_renewal_stops_after_gc": _PRIVATE,
        "test_strict_check": "expects the Redis client given to be type-checked; our lock "
        "uses the connection the Django settings configure, not one given",
    }.items()
}


# Its own tests sleep through leases and start hundreds of processes: about 105 s on an
# idle 2-core machine, so the suite's 2-minute bound was a coin toss under load.
@pytest.mark.timeout(600)
def test_python_redis_locks_tests_pass_on_our_lock(
    tmp_path: Path, redis_server: EmbeddedRedis
) -> None:
    if redis_server.socket_path is None:
        pytest.skip("the test server has no unix socket (its folder's path is too long)")
    version = "4.0.1"
    suite = unpack(
        "python-redis-lock",
        version,
        {
            f"tests/{name}": f"python_redis_lock_tests/{name}"
            for name in ("test_redis_lock.py", "config.py", "helper.py")
        },
    )
    folder = suite / "python_redis_lock_tests"
    shutil.copy(HERE / "python_redis_lock_conftest.py", folder / "conftest.py")
    outcomes, output = run_suite(
        [folder / "test_redis_lock.py"],
        tmp_path / "report.xml",
        {
            "RC_TEST_REDIS_URL": redis_server.url,
            "RC_TEST_REDIS_SOCKET": str(redis_server.socket_path),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": os.pathsep.join([str(HERE / "python_redis_lock"), str(ROOT)]),
        },
        ("-o", "filterwarnings=default", "-p", "pytester", "--confcutdir", str(folder)),
    )
    print(output[-3000:])
    check(
        f"python-redis-lock {version}'s tests on RedisLock",
        outcomes,
        PRL_NOT_APPLICABLE,
        output,
        15,
    )
