"""Subject name strategies: which registry subject a topic's keys or values are kept under.

Java's three (``io.confluent.kafka.serializers.subject.*``), by their class names, short names
or confluent-kafka's function names:

* ``topic`` (``TopicNameStrategy``, the default): ``<topic>-key`` / ``<topic>-value``;
* ``record`` (``RecordNameStrategy``): the record's full name, whatever the topic;
* ``topic_record`` (``TopicRecordNameStrategy``): ``<topic>-<record full name>``.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["SubjectNameStrategy", "parse_strategy", "subject_name"]

SubjectNameStrategy = Literal["topic", "record", "topic_record"]

_NAMES: dict[str, SubjectNameStrategy] = {
    "topic": "topic", "topicnamestrategy": "topic", "topic_subject_name_strategy": "topic",
    "record": "record", "recordnamestrategy": "record", "record_subject_name_strategy": "record",
    "topic_record": "topic_record", "topicrecord": "topic_record",
    "topicrecordnamestrategy": "topic_record",
    "topic_record_subject_name_strategy": "topic_record",
}


def parse_strategy(name: str) -> SubjectNameStrategy:
    """A strategy from any of its names: ``topic``, ``TopicNameStrategy`` or Java's full class
    name ``io.confluent.kafka.serializers.subject.TopicNameStrategy`` (and the others')."""
    short = name.rsplit(".", 1)[-1].strip().lower()
    found = _NAMES.get(short)
    if found is None:
        raise ValueError(f"unknown subject name strategy {name!r}: TopicNameStrategy, "
                         f"RecordNameStrategy or TopicRecordNameStrategy")
    return found


def subject_name(strategy: SubjectNameStrategy, topic: str, is_key: bool,
                 record_name: str | None) -> str:
    """The subject for ``topic``'s keys (``is_key``) or values under ``strategy``."""
    if strategy == "topic":
        return f"{topic}-{'key' if is_key else 'value'}"
    if record_name is None:
        raise ValueError(f"the {strategy} subject name strategy needs a named record schema")
    return record_name if strategy == "record" else f"{topic}-{record_name}"
