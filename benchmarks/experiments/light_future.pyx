# cython: language_level=3
"""A measuring device, not part of aiokprod: the least a future needs to work with asyncio's
Task, ``await``, ``gather`` and ``wait``, in C, so ``benchmarks/asyncio_floor.py`` can show
what a delivery future of our own would save against ``asyncio.Future`` (issue 25's direction
(a)). It keeps no traceback, no debug hooks and no exception chaining; do not use it for
anything else."""

import asyncio


cdef class LightFuture:
    cdef object _loop
    cdef object _result
    cdef object _exception
    cdef list _callbacks
    cdef public object _asyncio_future_blocking
    cdef int _state  # 0 pending, 1 done, 2 cancelled

    def __cinit__(self, loop):
        self._loop = loop
        self._callbacks = None
        self._asyncio_future_blocking = False
        self._state = 0

    def get_loop(self):
        return self._loop

    def done(self):
        return self._state != 0

    def cancelled(self):
        return self._state == 2

    def result(self):
        if self._state == 2:
            raise asyncio.CancelledError()
        if self._state == 0:
            raise asyncio.InvalidStateError("result is not set")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self):
        if self._state == 2:
            raise asyncio.CancelledError()
        if self._state == 0:
            raise asyncio.InvalidStateError("exception is not set")
        return self._exception

    def add_done_callback(self, fn, *, context=None):
        if self._state != 0:
            self._loop.call_soon(fn, self, context=context)
        elif self._callbacks is None:
            self._callbacks = [(fn, context)]
        else:
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn):
        if self._callbacks is None:
            return 0
        kept = [c for c in self._callbacks if c[0] != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    cdef void _schedule(self):
        cdef list callbacks = self._callbacks
        if callbacks is None:
            return
        self._callbacks = None
        call_soon = self._loop.call_soon
        for fn, context in callbacks:
            call_soon(fn, self, context=context)

    def set_result(self, result):
        if self._state != 0:
            raise asyncio.InvalidStateError("already done")
        self._result = result
        self._state = 1
        self._schedule()

    def set_exception(self, exception):
        if self._state != 0:
            raise asyncio.InvalidStateError("already done")
        self._exception = exception
        self._state = 1
        self._schedule()

    def cancel(self, msg=None):
        if self._state != 0:
            return False
        self._state = 2
        self._schedule()
        return True

    def _make_cancelled_error(self):
        return asyncio.CancelledError()

    def __await__(self):
        if self._state == 0:
            self._asyncio_future_blocking = True
            yield self
        return self.result()

    __iter__ = __await__
