"""What the registry client raises: one class, with the registry's own answer when it gave one."""

from __future__ import annotations

from aiokprod.errors import SerializationError

__all__ = ["SchemaRegistryError"]


class SchemaRegistryError(SerializationError):
    """A registry request failed: the registry's answer (``status``, its ``error_code`` and
    message, e.g. 409 for a schema the subject's compatibility rule refuses) or no answer within
    the client's bound (``status`` is ``None``). A ``SerializationError``, so a ``send()`` whose
    schema could not be registered fails like any record that could not be serialized."""

    def __init__(self, message: str, *, status: int | None = None,
                 error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
