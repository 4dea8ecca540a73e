"""Send Avro records through a Schema Registry, in the Confluent wire format.

    python examples/schema_registry_avro.py 127.0.0.1:9092 orders http://127.0.0.1:8081

Needs `pip install aiokprod[avro]`. The registry may be Confluent's or any with its API
(Apicurio Registry serves it under /apis/ccompat/v7); credentials, if it wants them, come from
the environment: SCHEMA_REGISTRY_USER_INFO="user:password".
"""

from __future__ import annotations

import asyncio
import os
import sys

from aiokprod import Producer
from aiokprod.schema_registry import SchemaRegistryClient
from aiokprod.schema_registry.avro import AvroSerializer

ORDER = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


async def produce(bootstrap: str, topic: str, registry_url: str) -> None:
    registry = SchemaRegistryClient(
        registry_url, basic_auth_user_info=os.environ.get("SCHEMA_REGISTRY_USER_INFO"))
    values = AvroSerializer(registry, ORDER)  # subject "<topic>-value", registered on first use
    async with Producer(bootstrap_servers=bootstrap, value_serializer=values,
                        linger_ms=5) as producer:
        # optional: register now (at a service's start, say) instead of on the first send
        schema_id = await values.prepare(topic)
        deliveries = [await producer.send(topic, {"id": i, "customer": f"c{i}",
                                                  "amount": i * 2.5})
                      for i in range(100)]
        last = (await asyncio.gather(*deliveries))[-1]
        print(f"schema id {schema_id}: 100 orders, the last at partition {last.partition} "
              f"offset {last.offset}")


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    asyncio.run(produce(sys.argv[1], sys.argv[2], sys.argv[3]))


if __name__ == "__main__":
    main()
