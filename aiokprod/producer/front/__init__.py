"""What a send call does to its records before they are queued: the checks on its input, the bulk
paths' conversions (``send_many``, ``send_columns``) and their results, and when a tight send
loop lets the sender run.
"""
