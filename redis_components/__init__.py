"""The application components of *Redis in Action*, chapter 6, as a Django app.

Importing this package needs no Django settings and opens no connection: settings,
clients and scripts are resolved on first use.
"""

from __future__ import annotations

import importlib.metadata

from .autocomplete import Guild, RecentContacts
from .connection import get_async_client, get_client
from .exceptions import (
    ChannelBusy,
    ChatLimitReached,
    ChatNotFound,
    ConfigurationError,
    FilesError,
    InvalidInput,
    LockAlreadyHeld,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    MessagingError,
    NotAMember,
    QueueFull,
    ReaderDropped,
    RedisComponentsError,
    SemaphoreError,
    SemaphoreNotAcquired,
    SemaphoreNotOwned,
    SoftTimeLimitExceeded,
    TaskError,
    TaskNotCancellable,
    TaskNotDurable,
    TaskNotRegistered,
    TaskResultDoesNotExist,
    TaskSerializationError,
)
from .files import ReceivedFile, ReceiveProgress, SendProgress, receive_files, send_files
from .guard import Busy
from .locks import LockGroup, LockHandle, LockScope, RedisLock, fenced_update, redis_lock
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
    Retry,
    cancel,
    current_task,
    defer,
    get_result,
    periodic,
    task,
)

__version__ = importlib.metadata.version("django-redis-components")

__all__ = [
    "Busy",
    "ChannelBusy",
    "ChatLimitReached",
    "ChatNotFound",
    "ChatSummary",
    "ConfigurationError",
    "FilesError",
    "GroupChat",
    "Guild",
    "InvalidInput",
    "LockAlreadyHeld",
    "LockError",
    "LockGroup",
    "LockHandle",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "LockScope",
    "Mailbox",
    "Message",
    "MessageList",
    "MessagingError",
    "NotAMember",
    "Pending",
    "Permit",
    "QueueFull",
    "ReaderDropped",
    "ReceiveProgress",
    "ReceivedFile",
    "RecentContacts",
    "RedisComponentsError",
    "RedisLock",
    "RedisSemaphore",
    "RedisTask",
    "Retry",
    "SemaphoreError",
    "SemaphoreNotAcquired",
    "SemaphoreNotOwned",
    "SendProgress",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskNotCancellable",
    "TaskNotDurable",
    "TaskNotRegistered",
    "TaskResultDoesNotExist",
    "TaskSerializationError",
    "UnreadableMessage",
    "__version__",
    "cancel",
    "current_task",
    "defer",
    "fenced_update",
    "get_async_client",
    "get_client",
    "get_result",
    "periodic",
    "receive_files",
    "redis_lock",
    "redis_semaphore",
    "send_files",
    "task",
]


def __getattr__(name: str) -> object:
    """Names of 0.1 that the one task model replaced (``Task``, ``TaskResult``,
    ``TaskStatus``): they work, with a ``DeprecationWarning``, until 0.3."""
    if name in ("Task", "TaskResult", "TaskStatus"):
        from . import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
