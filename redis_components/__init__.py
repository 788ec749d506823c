"""The application components of *Redis in Action*, chapter 6, as a Django app.

Importing this package needs no Django settings and opens no connection: settings,
clients and scripts are resolved on first use.
"""

from __future__ import annotations

from .connection import get_client
from .exceptions import (
    ChatNotFound,
    ConfigurationError,
    InvalidInput,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    MessagingError,
    NotAMember,
    QueueFull,
    RedisComponentsError,
    SemaphoreError,
    SemaphoreNotAcquired,
    SemaphoreNotOwned,
    TaskError,
    TaskNotRegistered,
    TaskSerializationError,
)
from .queues import Retry, Task, current_task, defer, task

__version__ = "0.1.0"

__all__ = [
    "ChatNotFound",
    "ConfigurationError",
    "InvalidInput",
    "LockError",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "MessagingError",
    "NotAMember",
    "QueueFull",
    "RedisComponentsError",
    "Retry",
    "SemaphoreError",
    "SemaphoreNotAcquired",
    "SemaphoreNotOwned",
    "Task",
    "TaskError",
    "TaskNotRegistered",
    "TaskSerializationError",
    "__version__",
    "current_task",
    "defer",
    "get_client",
    "task",
]
