"""The application components of *Redis in Action*, chapter 6, as a Django app.

Importing this package needs no Django settings and opens no connection: settings,
clients and scripts are resolved on first use.

The top level holds the components and the few exceptions a caller catches every day;
every exception is in :mod:`redis_components.exceptions`. No name here shadows one of
``django.tasks``: our task decorator is :func:`redis_task` (its tasks are Django's).
"""

from __future__ import annotations

import importlib.metadata

from .autocomplete import Guild, RecentContacts
from .connection import get_async_client, get_client
from .deprecation import deprecated
from .exceptions import (
    InvalidInput,
    LockLost,
    LockNotAcquired,
    QueueFull,
    RedisComponentsError,
    SemaphoreNotAcquired,
)
from .files import (
    ReceivedFile,
    ReceiveProgress,
    SendProgress,
    areceive_files,
    asend_files,
    receive_files,
    send_files,
)
from .guard import Busy
from .locks import (
    LockGroup,
    LockHandle,
    LockScope,
    RedisLock,
    fenced_get,
    fenced_set,
    fenced_update,
    redis_lock,
)
from .messaging import (
    ChatSummary,
    GroupChat,
    Mailbox,
    Message,
    MessageList,
    Pending,
    UnreadableMessage,
)
from .semaphores import Permit, RedisSemaphore, redis_semaphore
from .tasks import (
    RedisTask,
    RedisTaskContext,
    RedisTaskResult,
    Retry,
    Workflow,
    aget_progress,
    cancel,
    chain,
    concurrency_limit,
    current_task,
    defer,
    enqueue_many,
    get_progress,
    get_result,
    get_workflow,
    group,
    periodic,
    rate_limit,
    redis_task,
    signature,
)

__version__ = importlib.metadata.version("django-redis-components")

__all__ = [
    "Busy",
    "ChatSummary",
    "GroupChat",
    "Guild",
    "InvalidInput",
    "LockGroup",
    "LockHandle",
    "LockLost",
    "LockNotAcquired",
    "LockScope",
    "Mailbox",
    "Message",
    "MessageList",
    "Pending",
    "Permit",
    "QueueFull",
    "ReceiveProgress",
    "ReceivedFile",
    "RecentContacts",
    "RedisComponentsError",
    "RedisLock",
    "RedisSemaphore",
    "RedisTask",
    "RedisTaskContext",
    "RedisTaskResult",
    "Retry",
    "SemaphoreNotAcquired",
    "SendProgress",
    "UnreadableMessage",
    "Workflow",
    "__version__",
    "aget_progress",
    "areceive_files",
    "asend_files",
    "cancel",
    "chain",
    "concurrency_limit",
    "current_task",
    "defer",
    "enqueue_many",
    "fenced_get",
    "fenced_set",
    "fenced_update",
    "get_async_client",
    "get_client",
    "get_progress",
    "get_result",
    "get_workflow",
    "group",
    "periodic",
    "rate_limit",
    "receive_files",
    "redis_lock",
    "redis_semaphore",
    "redis_task",
    "send_files",
    "signature",
]

# Exceptions that 0.1 exported here: they are in redis_components.exceptions.
_MOVED_EXCEPTIONS = frozenset(
    {
        "ChannelBusy",
        "ChatLimitReached",
        "ChatNotFound",
        "ConfigurationError",
        "FilesError",
        "LockAlreadyHeld",
        "LockError",
        "LockNotOwned",
        "MessagingError",
        "NotAMember",
        "ReaderDropped",
        "SemaphoreError",
        "SemaphoreNotOwned",
        "SoftTimeLimitExceeded",
        "TaskError",
        "TaskNotCancellable",
        "TaskNotDurable",
        "TaskNotRegistered",
        "TaskResultDoesNotExist",
        "TaskSerializationError",
    }
)


def __getattr__(name: str) -> object:
    """Names of 0.1 that moved or were replaced: they work, with a
    ``DeprecationWarning``, until 0.3 (see the changelog)."""
    if name in _MOVED_EXCEPTIONS:
        deprecated(
            f"importing {name} from redis_components",
            "import it from redis_components.exceptions",
            stacklevel=2,
        )
        from . import exceptions

        return getattr(exceptions, name)
    if name in ("task", "Task", "TaskResult", "TaskStatus"):
        from . import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
