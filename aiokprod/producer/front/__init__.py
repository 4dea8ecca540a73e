"""What a call does before anything is queued: the checks on a send's input, the bulk paths'
conversions (``send_many``, ``send_columns``), when a tight send loop lets the sender run, and
the work of the Producer's transaction methods.
"""
