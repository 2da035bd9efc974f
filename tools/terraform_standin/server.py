"""The stand-in provider process: serves one generated schema over the Terraform plugin protocol v6.

Terraform starts it (through the launcher that install.py writes into the plugin mirror) as it starts any
provider: go-plugin handshake on stdout, then gRPC over a Unix socket with the TLS certificate it printed.
It runs in its own virtual environment (.venv-tfstandin: the `tf` package's tfplugin6 bindings, which need
protobuf 5) and imports nothing of this repository, so it is started as a file.

What it answers (see __init__.py for what it cannot check):
  GetMetadata, GetProviderSchema      the generated schema, built once into protobuf and cached beside it
  Validate*Config, ConfigureProvider  no diagnostics: Terraform itself checks names, types, required
                                      arguments and block counts against the schema before calling these;
                                      a real provider's own validators (enums, ConflictsWith, ARN formats)
                                      are not in any schema and are not reproduced
  Plan/Apply/Read/UpgradeResourceState, ReadDataSource
                                      schema-shaped placeholders (computed values unknown at plan,
                                      "standin-<name>" / 0 / false / empty at apply), so a plan or apply
                                      without mock_provider still runs; under `mock_provider` Terraform
                                      answers these itself from mock_resource / mock_data defaults.
                                      With TF_STANDIN_MODE=render in the environment: realistic,
                                      deterministic ids, ARNs, names and data sources instead (values.py),
                                      so `terraform apply` + `show -json` render a deployment's state.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from concurrent import futures
from pathlib import Path

NESTING = {"single": 1, "list": 2, "set": 3, "map": 4, "group": 5}
MODE_VARIABLE = "TF_STANDIN_MODE"  # "render": values.Renderer answers plan, apply and data sources


def _attribute_pb(pb, name: str, a: dict):
    kwargs = {
        "name": name,
        "required": bool(a.get("required")),
        "optional": bool(a.get("optional")),
        "computed": bool(a.get("computed")),
        "sensitive": bool(a.get("sensitive")),
    }
    if "type" in a:
        kwargs["type"] = json.dumps(a["type"]).encode()
    else:
        nt = a["nested_type"]
        kwargs["nested_type"] = pb.Schema.Object(
            attributes=[_attribute_pb(pb, n, v) for n, v in sorted(nt["attributes"].items())],
            nesting=NESTING[nt["nesting_mode"]],
        )
    return pb.Schema.Attribute(**kwargs)


def _block_pb(pb, block: dict):
    return pb.Schema.Block(
        attributes=[_attribute_pb(pb, n, a) for n, a in sorted(block.get("attributes", {}).items())],
        block_types=[
            pb.Schema.NestedBlock(
                type_name=n,
                block=_block_pb(pb, nb["block"]),
                nesting=NESTING[nb["nesting_mode"]],
                min_items=nb.get("min_items", 0),
                max_items=nb.get("max_items", 0),
            )
            for n, nb in sorted(block.get("block_types", {}).items())
        ],
    )


def schema_response_bytes(schema_path: Path) -> bytes:
    """GetProviderSchema.Response, serialized; cached in <schema>.pb (rebuilt when the JSON is newer)."""
    from tf.gen import tfplugin_pb2 as pb

    cache = schema_path.with_suffix(".pb")
    if cache.exists() and cache.stat().st_mtime >= schema_path.stat().st_mtime:
        return cache.read_bytes()
    doc = json.loads(schema_path.read_text())
    (provider,) = doc["provider_schemas"].values()
    response = pb.GetProviderSchema.Response(
        provider=pb.Schema(version=0, block=_block_pb(pb, provider["provider"]["block"])),
        provider_meta=pb.Schema(version=0, block=pb.Schema.Block()),
        resource_schemas={
            t: pb.Schema(version=s.get("version", 0), block=_block_pb(pb, s["block"]))
            for t, s in provider["resource_schemas"].items()
        },
        data_source_schemas={
            t: pb.Schema(version=s.get("version", 0), block=_block_pb(pb, s["block"]))
            for t, s in provider["data_source_schemas"].items()
        },
        server_capabilities=pb.ServerCapabilities(plan_destroy=True),
    )
    data = response.SerializeToString()
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(cache)
    return data


class _Values:
    """Walks msgpack-decoded values along a block schema (the JSON form)."""

    def __init__(self, unknown):
        self.unknown = unknown

    def placeholder(self, name: str, t):
        if t == "string":
            return f"standin-{name}"
        if t == "number":
            return 0
        if t == "bool":
            return False
        if isinstance(t, list) and t[0] in ("list", "set"):
            return []
        if isinstance(t, list) and t[0] == "map":
            return {}
        return None  # objects, tuples and dynamic values: null

    def fill(self, value: dict | None, block: dict, *, unknown: bool) -> dict | None:
        """Computed attributes that are null become unknown (plan) or a placeholder (apply, read)."""
        if value is None:
            return None
        out = dict(value)
        for name, a in block.get("attributes", {}).items():
            v = out.get(name)
            if a.get("computed") and (v is None or v is self.unknown):
                out[name] = self.unknown if unknown else self.placeholder(name, a.get("type"))
            elif "nested_type" in a and v is not None and v is not self.unknown:
                nt = a["nested_type"]
                inner = {"attributes": nt["attributes"]}
                out[name] = self._each(v, nt["nesting_mode"], inner, unknown)
        for name, nb in block.get("block_types", {}).items():
            v = out.get(name)
            if v is not None and v is not self.unknown:
                out[name] = self._each(v, nb["nesting_mode"], nb["block"], unknown)
        return out

    def _each(self, v, nesting, block, unknown):
        if nesting in ("single", "group"):
            return self.fill(v, block, unknown=unknown)
        if nesting == "map":
            return {k: self.fill(x, block, unknown=unknown) for k, x in v.items()}
        return [self.fill(x, block, unknown=unknown) for x in v]


class Provider:
    def __init__(self, schema_path: Path, stop: threading.Event):
        from tf.gen import tfplugin_pb2 as pb
        from tf.types import Unknown

        self.pb = pb
        self.schema_path = schema_path
        self.stop = stop
        self.values = _Values(Unknown)
        self.renderer = None
        if os.environ.get(MODE_VARIABLE) == "render":
            try:
                import values as render_values  # run as a file: this directory is on sys.path
            except ImportError:  # imported as tools.terraform_standin.server
                from tools.terraform_standin import values as render_values
            self.renderer = render_values.Renderer(Unknown)
            self.RenderError = render_values.RenderError
        self._schema_bytes = None
        self._doc = None
        self._lock = threading.Lock()

    # -- schema ----------------------------------------------------------------------------------------
    def schema_bytes(self) -> bytes:
        with self._lock:
            if self._schema_bytes is None:
                self._schema_bytes = schema_response_bytes(self.schema_path)
            return self._schema_bytes

    def _block(self, kind: str, type_name: str) -> dict:
        with self._lock:
            if self._doc is None:
                (self._doc,) = json.loads(self.schema_path.read_text())["provider_schemas"].values()
        return self._doc[kind][type_name]["block"]

    # -- RPCs ------------------------------------------------------------------------------------------
    def GetMetadata(self, request, context):
        return self.pb.GetMetadata.Response(server_capabilities=self.pb.ServerCapabilities(plan_destroy=True))

    def GetProviderSchema(self, request, context):
        return self.schema_bytes()

    def ValidateProviderConfig(self, request, context):
        return self.pb.ValidateProviderConfig.Response()

    def ValidateResourceConfig(self, request, context):
        return self.pb.ValidateResourceConfig.Response()

    def ValidateDataResourceConfig(self, request, context):
        return self.pb.ValidateDataResourceConfig.Response()

    def ConfigureProvider(self, request, context):
        if self.renderer is not None:
            from tf.utils import read_dynamic_value

            self.renderer.configure(read_dynamic_value(request.config))
        return self.pb.ConfigureProvider.Response()

    def _error(self, summary: str):
        return [self.pb.Diagnostic(severity=self.pb.Diagnostic.ERROR, summary=summary)]

    def UpgradeResourceState(self, request, context):
        return self.pb.UpgradeResourceState.Response(upgraded_state=self.pb.DynamicValue(json=request.raw_state.json))

    def ReadResource(self, request, context):
        return self.pb.ReadResource.Response(new_state=request.current_state, private=request.private)

    def PlanResourceChange(self, request, context):
        from tf.utils import read_dynamic_value, to_dynamic_value

        proposed = read_dynamic_value(request.proposed_new_state)
        prior = read_dynamic_value(request.prior_state)
        if self.renderer is not None:
            block = self._block("resource_schemas", request.type_name)
            planned = self.renderer.plan(request.type_name, proposed, prior, block)
            return self.pb.PlanResourceChange.Response(planned_state=to_dynamic_value(planned))
        if proposed is not None and prior is None:
            proposed = self.values.fill(proposed, self._block("resource_schemas", request.type_name), unknown=True)
        return self.pb.PlanResourceChange.Response(planned_state=to_dynamic_value(proposed))

    def ApplyResourceChange(self, request, context):
        from tf.utils import read_dynamic_value, to_dynamic_value

        planned = read_dynamic_value(request.planned_state)
        if self.renderer is not None:
            new = self.renderer.apply(request.type_name, planned, self._block("resource_schemas", request.type_name))
            return self.pb.ApplyResourceChange.Response(new_state=to_dynamic_value(new))
        new = self.values.fill(planned, self._block("resource_schemas", request.type_name), unknown=False)
        return self.pb.ApplyResourceChange.Response(new_state=to_dynamic_value(new))

    def ReadDataSource(self, request, context):
        from tf.utils import read_dynamic_value, to_dynamic_value

        config = read_dynamic_value(request.config)
        if self.renderer is not None:
            try:
                state = self.renderer.read_data(
                    request.type_name, config, self._block("data_source_schemas", request.type_name)
                )
            except self.RenderError as exc:
                return self.pb.ReadDataSource.Response(diagnostics=self._error(str(exc)))
            return self.pb.ReadDataSource.Response(state=to_dynamic_value(state))
        state = self.values.fill(config, self._block("data_source_schemas", request.type_name), unknown=False)
        return self.pb.ReadDataSource.Response(state=to_dynamic_value(state))

    def GetFunctions(self, request, context):
        return self.pb.GetFunctions.Response()

    def StopProvider(self, request, context):
        self.stop.set()
        return self.pb.StopProvider.Response()


RPCS = (
    "GetMetadata",
    "GetProviderSchema",
    "ValidateProviderConfig",
    "ValidateResourceConfig",
    "ValidateDataResourceConfig",
    "ConfigureProvider",
    "UpgradeResourceState",
    "ReadResource",
    "PlanResourceChange",
    "ApplyResourceChange",
    "ReadDataSource",
    "GetFunctions",
    "StopProvider",
)


def serve(schema_path: Path) -> None:
    import base64
    import tempfile

    import grpc
    from tf.gen import grpc_controller_pb2 as controller_pb
    from tf.gen import grpc_controller_pb2_grpc as controller_rpc
    from tf.gen import grpc_stdio_pb2_grpc as stdio_rpc
    from tf.gen import tfplugin_pb2 as pb
    from tf.runner import _self_signed_cert  # noqa: PLC2701 (tf serves no public way to make the handshake cert)

    stop = threading.Event()
    provider = Provider(schema_path, stop)

    def handler(name):
        request_cls = getattr(pb, name).Request
        return grpc.unary_unary_rpc_method_handler(
            getattr(provider, name),
            request_deserializer=request_cls.FromString,
            response_serializer=lambda r: r if isinstance(r, bytes) else r.SerializeToString(),
        )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tfplugin6.Provider", {n: handler(n) for n in RPCS}),)
    )

    class Controller(controller_rpc.GRPCControllerServicer):
        def Shutdown(self, request, context):
            stop.set()
            return controller_pb.Empty()

    class Stdio(stdio_rpc.GRPCStdioServicer):
        def StreamStdio(self, request, context):
            return iter([])

    controller_rpc.add_GRPCControllerServicer_to_server(Controller(), server)
    stdio_rpc.add_GRPCStdioServicer_to_server(Stdio(), server)

    with tempfile.TemporaryDirectory(prefix="tfstandin-") as tmp:
        sock = f"{tmp}/plugin.sock"
        chain, credentials = _self_signed_cert()
        server.add_secure_port(f"unix://{sock}", credentials)
        server.start()
        cert = base64.b64encode(chain).decode().rstrip("=")
        print(f"1|6|unix|{sock}|grpc|{cert}", flush=True)
        stop.wait()
        server.stop(grace=0.05)
    sys.stdout.flush()
    os._exit(0)  # Terraform waits for the process: skip the interpreter's slow teardown of gRPC's threads


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
