from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from redis_components.checks import check_settings
from redis_components.conf import DEFAULTS, OPTIONAL_NUMBERS, ZERO_ALLOWED

REDIS_CACHE = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}


def ids(**overrides: Any) -> list[str]:
    with override_settings(**overrides):
        return [message.id or "" for message in check_settings()]


def test_valid_settings_pass() -> None:
    assert ids(REDIS_COMPONENTS={"CACHE_ALIAS": "default", "KEY_PREFIX": "shop:rc"}) == []


def test_e001_setting_not_a_dict() -> None:
    assert ids(REDIS_COMPONENTS=["CACHE_ALIAS"]) == ["redis_components.E001"]


def test_w001_unknown_key_suggests_the_valid_one() -> None:
    with override_settings(REDIS_COMPONENTS={"CACHE_ALIASS": "default"}):
        [message] = check_settings()
    assert message.id == "redis_components.W001"
    assert "Did you mean 'CACHE_ALIAS'?" in (message.hint or "")
    assert "KEY_PREFIX" in (message.hint or "")


def test_e003_cache_alias_not_in_caches() -> None:
    assert ids(REDIS_COMPONENTS={"CACHE_ALIAS": "nope"}) == ["redis_components.E003"]


def test_e004_cache_is_not_django_redis() -> None:
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert ids(CACHES=caches) == ["redis_components.E004"]


def test_e007_shard_client_is_refused() -> None:
    cache = {**REDIS_CACHE, "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"}}
    assert ids(CACHES={"default": cache}) == ["redis_components.E007"]


CLUSTER_OPTIONS = {"CLIENT_CLASS": "redis_components.connection.ClusterClient"}


@pytest.mark.parametrize(
    ("location", "problems"),
    [
        ("redis://10.0.0.1:7000/0", []),
        (["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"], []),
        ("unix:///tmp/redis.sock", ["redis_components.E009"]),
        ("redis://10.0.0.1:7000/3", ["redis_components.E009"]),
    ],
)
def test_e009_cluster_location(location: object, problems: list[str]) -> None:
    cache = {**REDIS_CACHE, "LOCATION": location, "OPTIONS": CLUSTER_OPTIONS}
    assert ids(CACHES={"default": cache}) == problems


SENTINEL_OPTIONS = {
    "CLIENT_CLASS": "django_redis.client.SentinelClient",
    "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
    "SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379)],
}


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        ({}, []),
        ({"CONNECTION_FACTORY": "django_redis.pool.ConnectionFactory"}, ["redis_components.E010"]),
        ({"SENTINELS": []}, ["redis_components.E010"]),
        ({"SENTINELS": ["10.0.0.1:26379"]}, ["redis_components.E010"]),
    ],
)
def test_e010_sentinel_setup(change: dict[str, object], problems: list[str]) -> None:
    cache = {**REDIS_CACHE, "LOCATION": "redis://mymaster/0"}
    cache["OPTIONS"] = {**SENTINEL_OPTIONS, **change}
    assert ids(CACHES={"default": cache}) == problems


NUMERIC = [
    name
    for name, default in DEFAULTS.items()
    if isinstance(default, (int, float))
    and not isinstance(default, bool)
    and name not in OPTIONAL_NUMBERS  # None is good for these
]


def test_the_numeric_settings_are_found() -> None:
    assert {"LOCK_TIMEOUT", "TASK_MAX_CRASHES", "FILES_BLOCK_SIZE"} <= set(NUMERIC)


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("value", [0, -1, "10", True, None])
def test_e005_bad_numeric_values(name: str, value: object) -> None:
    wanted = [] if value == 0 and name in ZERO_ALLOWED else ["redis_components.E005"]
    assert ids(REDIS_COMPONENTS={name: value}) == wanted


@pytest.mark.parametrize("value", [-0.1, "0", None])
def test_e005_a_setting_that_may_be_zero(value: object) -> None:
    assert ids(REDIS_COMPONENTS={"TASK_PROGRESS_INTERVAL": 0}) == []
    with override_settings(REDIS_COMPONENTS={"TASK_PROGRESS_INTERVAL": value}):
        [message] = check_settings()
    assert "a number >= 0" in message.msg


@pytest.mark.parametrize("name", [name for name in NUMERIC if isinstance(DEFAULTS[name], int)])
def test_e005_an_integer_setting_refuses_a_fraction(name: str) -> None:
    assert ids(REDIS_COMPONENTS={name: 2.5}) == ["redis_components.E005"]


def test_e005_an_integer_setting_that_may_be_zero_says_it_wants_an_integer() -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_TAKE_AHEAD": 2.5}):
        [message] = check_settings()
    assert "must be an integer >= 0, not 2.5" in message.msg


OPTIONAL = pytest.mark.parametrize("name", ["CHAT_MAX_AGE", "TASK_SHUTDOWN_GRACE"])


@OPTIONAL
@pytest.mark.parametrize("value", [None, 30, 2.5])
def test_an_optional_number_may_be_none_or_positive(name: str, value: object) -> None:
    assert ids(REDIS_COMPONENTS={name: value}) == []


@OPTIONAL
@pytest.mark.parametrize("value", [0, -1, "10", True])
def test_e005_bad_optional_number(name: str, value: object) -> None:
    with override_settings(REDIS_COMPONENTS={name: value}):
        [message] = check_settings()
    assert message.id == "redis_components.E005"
    assert "a positive number or None" in message.msg


@pytest.mark.parametrize("prefix", ["", "rc{x}", "has space", "x" * 65, 7])
def test_e006_bad_key_prefix(prefix: object) -> None:
    assert ids(REDIS_COMPONENTS={"KEY_PREFIX": prefix}) == ["redis_components.E006"]


def test_manage_check_prints_each_id(tmp_path: Path) -> None:
    (tmp_path / "broken_settings.py").write_text(
        textwrap.dedent(
            """
            SECRET_KEY = "x"
            INSTALLED_APPS = ["redis_components"]
            CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
            REDIS_COMPONENTS = {"KEY_PREFIX": "a b", "CACHE_ALIASS": "default"}
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "django", "check", "--settings", "broken_settings"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    for check_id in ("E004", "E006", "W001"):
        assert f"redis_components.{check_id}" in result.stderr
    assert "needs a django-redis cache" in result.stderr


@pytest.mark.parametrize("limits", [[1], {"q": 0}, {"q": "10"}, {"q": True}, {"": 5}, {1: 5}])
def test_e008_bad_queue_limits(limits: object) -> None:
    assert ids(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": limits}) == ["redis_components.E008"]


@pytest.mark.parametrize("counts", [[3], {"q": 0}, {"q": 65}, {"q": "3"}, {"q": 2.5}, {"": 2}])
def test_e019_bad_queue_partitions(counts: object) -> None:
    assert ids(REDIS_COMPONENTS={"QUEUE_PARTITIONS": counts}) == ["redis_components.E019"]


def test_queue_partitions_from_1_to_64_pass() -> None:
    assert ids(REDIS_COMPONENTS={"QUEUE_PARTITIONS": {"hot": 6, "cold": 1, "x": 64}}) == []


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ([], "must be a dict of limit keys"),
        ({"api": 5}, "'api' must map to {'concurrency': n} or {'rate': n"),
        ({"api": {"concurrency": 0}}, "'api': concurrency: must be a positive integer"),
        ({"api": {"rate": 0}}, "'api': rate: must be a positive integer"),
        ({"api": {"rate": 5, "per": 0}}, "'api': per: must be a positive number"),
        ({"api": {"rate": 5, "burst": -1}}, "'api': burst: must be"),
        ({"api": {"concurrency": 2, "per": 1}}, "'api' must map to"),
        ({"a*b": {"concurrency": 2}}, "'*' may only end a key"),
        ({"": {"concurrency": 2}}, "invalid: the key '': must not be empty"),
    ],
)
def test_e018_bad_task_limits(limits: object, problem: str) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_LIMITS": limits}):
        found = check_settings()
    assert [message.id for message in found] == ["redis_components.E018"]
    assert problem in found[0].msg


def test_task_limits_pass() -> None:
    limits = {"stripe": {"rate": 40, "per": 1.0, "burst": 5}, "customer:*": {"concurrency": 5}}
    assert ids(REDIS_COMPONENTS={"TASK_LIMITS": limits}) == []


def test_queue_limits_pass() -> None:
    assert ids(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": {"emails": 10, "é": 1}}) == []


RECORD = "tests.testapp.tasks.record"


@pytest.mark.parametrize(
    ("schedules", "problem"),
    [
        ({"x": {"task": "no.such.task", "every": 60}}, "'no.such.task' is neither"),
        ({"x": {"task": RECORD, "cron": "not cron"}}, "cron: 'not cron' is not a cron"),
        ({"x": {"task": RECORD, "every": 60, "colour": "red"}}, "unknown keys ['colour']"),
        ({"x": {"task": RECORD, "every": 60, 1: 2}}, "unknown keys [1]"),
        ({"x": "every minute"}, "TASK_SCHEDULES['x'] must be a dict, not str"),
        ({"x": {"task": 5, "every": 60}}, "needs 'task'"),
        ({"x": {"task": "..", "every": 60}}, "'..' is neither"),
        ({7: {"task": RECORD, "every": 60}}, "TASK_SCHEDULES[7]: name: must be a string"),
        ({"x": {"task": RECORD, "every": 60, "args": [math.nan]}}, "args: this value cannot"),
        ({"x": {"task": RECORD, "every": 60, "args": [{1}]}}, "type set is not JSON"),
        ({"x": {"task": RECORD, "every": 60, "args": [b"x"]}}, "type bytes is not JSON"),
        ({"x": {"task": RECORD, "every": 60, "kwargs": {"a": b"x"}}}, "kwargs: this value"),
        ({"x": {"task": RECORD, "every": 60, "kwargs": {1: 2}}}, "kwargs: must be a dict with"),
        ([{"task": RECORD, "every": 60}], "TASK_SCHEDULES must be a dict"),
        ("x", "TASK_SCHEDULES must be a dict of schedule names to dicts, not str"),
        (None, "not NoneType"),
    ],
)
def test_bad_schedules_are_e013(schedules: object, problem: str) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": schedules}):
        [message] = check_settings()
    assert message.id == "redis_components.E013"
    assert problem in message.msg


def test_e014_metrics_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ids(REDIS_COMPONENTS={"METRICS": True}) == []
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    assert ids(REDIS_COMPONENTS={"METRICS": False}) == []
    with override_settings(REDIS_COMPONENTS={"METRICS": True}):
        [message] = check_settings()
    assert message.id == "redis_components.E014"
    assert "[metrics]" in (message.hint or "")


@pytest.mark.parametrize("value", ["yes", "no", 1, None])
def test_e020_metrics_is_true_or_false(value: object) -> None:
    with override_settings(REDIS_COMPONENTS={"METRICS": value}):
        [message] = check_settings()
    assert message.id == "redis_components.E020"
    assert repr(value) in message.msg


@pytest.mark.parametrize(
    ("token", "problem"), [("", "is empty"), ("  ", "is empty"), (42, "of type int")]
)
def test_e015_a_metrics_token_that_protects_nothing(token: object, problem: str) -> None:
    with override_settings(REDIS_COMPONENTS={"METRICS": True, "METRICS_TOKEN": token}):
        [message] = check_settings()
    assert message.id == "redis_components.E015"
    assert problem in message.msg


@pytest.mark.parametrize("token", [None, "s3cret", "clé-ключ"])
def test_a_metrics_token_may_be_none_or_any_text(token: object) -> None:
    assert ids(REDIS_COMPONENTS={"METRICS": True, "METRICS_TOKEN": token}) == []
