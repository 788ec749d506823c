"""The application components of *Redis in Action*, chapter 6, as a Django app.

Importing this package needs no Django settings and opens no connection: settings,
clients and scripts are resolved on first use.
"""

from __future__ import annotations

from .autocomplete import Guild, RecentContacts
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
    RedisComponentsError,
    SemaphoreError,
    SemaphoreNotAcquired,
    SemaphoreNotOwned,
    TaskError,
    TaskNotRegistered,
    TaskSerializationError,
)

__version__ = "0.1.0"

__all__ = [
    "ChatNotFound",
    "ConfigurationError",
    "Guild",
    "InvalidInput",
    "LockError",
    "LockLost",
    "LockNotAcquired",
    "LockNotOwned",
    "MessagingError",
    "NotAMember",
    "RecentContacts",
    "RedisComponentsError",
    "SemaphoreError",
    "SemaphoreNotAcquired",
    "SemaphoreNotOwned",
    "TaskError",
    "TaskNotRegistered",
    "TaskSerializationError",
    "__version__",
    "get_client",
]
