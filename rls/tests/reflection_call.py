"""Calls the running service through gRPC server reflection alone, as grpcurl
does (no .proto files): lists the services, resolves ShouldRateLimit's
messages from the server's descriptors, sends the JSON request, prints the
JSON response. Usage: reflection_call.py HOST:PORT 'JSON request'."""
import sys

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"

address, body = sys.argv[1], sys.argv[2]
channel = grpc.insecure_channel(address)
database = ProtoReflectionDescriptorDatabase(channel)
services = list(database.get_services())
print("services:", " ".join(sorted(services)))
method = DescriptorPool(database).FindServiceByName(SERVICE).methods_by_name["ShouldRateLimit"]
request_class = message_factory.GetMessageClass(method.input_type)
response_class = message_factory.GetMessageClass(method.output_type)
call = channel.unary_unary(
    f"/{SERVICE}/ShouldRateLimit",
    request_serializer=request_class.SerializeToString,
    response_deserializer=response_class.FromString,
)
response = call(json_format.Parse(body, request_class()), timeout=5)
print(json_format.MessageToJson(response, indent=None))
