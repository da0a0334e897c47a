/**
 * The part of Modal's gRPC API (modal_proto/api.proto and task_command_router.proto of modal-labs/modal-client) that
 * the stand-in serves: the services, messages and field numbers as the `modal` JS SDK (0.11) encodes them, checked
 * against its bundled codecs. Fields the stand-in neither reads nor sets are left out: protobuf skips them on decode.
 * Served with @grpc/grpc-js through protobufjs, so the SDK's unmodified nice-grpc client talks to it as to Modal.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import { Metadata } from '@grpc/grpc-js';
import protobuf from 'protobufjs';

const PROTO = `
syntax = "proto3";
package modal.client;

enum ObjectCreationType {
  OBJECT_CREATION_TYPE_UNSPECIFIED = 0; OBJECT_CREATION_TYPE_CREATE_IF_MISSING = 1; OBJECT_CREATION_TYPE_EPHEMERAL = 5;
}
message Empty {}
message StringMap { map<string, string> contents = 1; }
message SecretSource { string secret_id = 1; StringMap env = 2; }
message GenericResult {
  enum GenericStatus {
    GENERIC_STATUS_UNSPECIFIED = 0; GENERIC_STATUS_SUCCESS = 1; GENERIC_STATUS_FAILURE = 2;
    GENERIC_STATUS_TERMINATED = 3; GENERIC_STATUS_TIMEOUT = 4;
  }
  GenericStatus status = 1;
  string exception = 2;
  int32 exitcode = 3;
}
message AuthTokenGetRequest {}
message AuthTokenGetResponse { string token = 1; }
message AppGetOrCreateRequest { string app_name = 1; string environment_name = 2; ObjectCreationType object_creation_type = 3; }
message AppGetOrCreateResponse { string app_id = 1; }
message EnvironmentGetOrCreateRequest { string deployment_name = 1; ObjectCreationType object_creation_type = 2; }
message EnvironmentSettings { string image_builder_version = 1; string webhook_suffix = 2; }
message EnvironmentMetadata { string name = 1; EnvironmentSettings settings = 2; }
message EnvironmentGetOrCreateResponse { string environment_id = 1; EnvironmentMetadata metadata = 2; }
message EnvironmentListItem { string name = 1; double created_at = 3; bool default = 4; string environment_id = 6; }
message EnvironmentListResponse { repeated EnvironmentListItem items = 2; }
message SecretGetOrCreateRequest { string environment_name = 3; ObjectCreationType object_creation_type = 4; map<string, string> env_dict = 5; string app_id = 6; }
message SecretGetOrCreateResponse { string secret_id = 1; }
message BaseImage { string image_id = 1; string docker_tag = 2; }
message GPUConfig { uint32 count = 2; string gpu_type = 4; }
message Image { repeated BaseImage base_images = 5; repeated string dockerfile_commands = 6; GPUConfig gpu_config = 16; }
message ImageGetOrCreateRequest { Image image = 2; string app_id = 4; bool force_build = 7; string builder_version = 9; }
message ImageGetOrCreateResponse { string image_id = 1; GenericResult result = 2; }
message TaskLogs { string data = 1; }
message ImageJoinStreamingRequest { string image_id = 1; float timeout = 2; string last_entry_id = 3; }
message ImageJoinStreamingResponse { GenericResult result = 1; repeated TaskLogs task_logs = 2; string entry_id = 3; bool eof = 4; }
message ImageDeleteRequest { string image_id = 1; }
message ImageFromIdRequest { string image_id = 1; }
message ImagePublishRequest { string image_id = 1; string tag = 2; string environment_name = 3; }
message ImagePublishResponse { string image_id = 1; }
message ImageGetByTagRequest { string tag = 1; string environment_name = 2; }
message ImageGetByTagResponse { string image_id = 1; }
message ImageFromIdResponse { string image_id = 1; }
message Resources { uint32 memory_mb = 2; uint32 milli_cpu = 3; GPUConfig gpu_config = 4; uint32 memory_mb_max = 5; uint32 milli_cpu_max = 7; }
message NetworkAccess {
  enum NetworkAccessType { UNSPECIFIED = 0; OPEN = 1; BLOCKED = 2; ALLOWLIST = 3; }
  NetworkAccessType network_access_type = 1;
  repeated string allowed_cidrs = 2;
  repeated string allowed_domains = 3;
}
message SchedulerPlacement { repeated string regions = 4; }
message Sandbox {
  repeated string entrypoint_args = 1;
  string image_id = 3;
  repeated string secret_ids = 4;
  Resources resources = 5;
  uint32 timeout_secs = 7;
  optional string workdir = 8;
  bool block_network = 11;
  optional SchedulerPlacement scheduler_placement = 17;
  NetworkAccess network_access = 22;
  optional string name = 30;
}
message SandboxTag { string tag_name = 1; string tag_value = 2; }
message CommandRouterAccess { string jwt = 1; string url = 2; }
message SandboxCreateV2Request { string app_id = 1; Sandbox definition = 2; repeated SandboxTag tags = 4; repeated SecretSource secret_sources = 6; }
message SandboxCreateV2Response { string sandbox_id = 1; string task_id = 3; CommandRouterAccess command_router_access = 5; }
message SandboxGetTaskIdRequest { string sandbox_id = 1; optional float timeout = 2; bool wait_until_ready = 3; }
message SandboxGetTaskIdResponse { optional string task_id = 1; optional GenericResult task_result = 2; }
message SandboxGetCommandRouterAccessRequest { string sandbox_id = 1; string task_id = 2; }
message SandboxGetCommandRouterAccessResponse { string jwt = 1; string url = 2; }
message SandboxListRequest { string app_id = 1; double before_timestamp = 2; string environment_name = 3; bool include_finished = 4; repeated SandboxTag tags = 5; }
message SandboxInfo { string id = 1; double created_at = 3; string app_id = 5; repeated SandboxTag tags = 6; }
message SandboxListResponse { repeated SandboxInfo sandboxes = 1; }
message SandboxTerminateRequest { string sandbox_id = 1; }
message SandboxTerminateResponse { GenericResult existing_result = 1; }
message SandboxWaitRequest { string sandbox_id = 1; float timeout = 2; }
message SandboxWaitResponse { GenericResult result = 1; }
message RPCRetryPolicy { float retry_after_secs = 1; }
message RPCAny { string type_url = 1; bytes value = 2; }
message RPCStatus { int32 code = 1; string message = 2; repeated RPCAny details = 3; }
message SandboxCreateRequest { string app_id = 1; Sandbox definition = 2; string environment_name = 3; repeated SandboxTag tags = 4; }
message SandboxCreateResponse { string sandbox_id = 1; }
message TaskGetCommandRouterAccessRequest { string task_id = 1; }
message TaskGetCommandRouterAccessResponse { string jwt = 1; string url = 2; }
message SandboxTagsSetRequest { string environment_name = 1; string sandbox_id = 2; repeated SandboxTag tags = 3; }
message SandboxTagsGetRequest { string sandbox_id = 1; }
message SandboxTagsGetResponse { repeated SandboxTag tags = 1; }

service ModalClient {
  rpc AuthTokenGet(AuthTokenGetRequest) returns (AuthTokenGetResponse);
  rpc AppGetOrCreate(AppGetOrCreateRequest) returns (AppGetOrCreateResponse);
  rpc EnvironmentGetOrCreate(EnvironmentGetOrCreateRequest) returns (EnvironmentGetOrCreateResponse);
  rpc ImageGetOrCreate(ImageGetOrCreateRequest) returns (ImageGetOrCreateResponse);
  rpc ImageJoinStreaming(ImageJoinStreamingRequest) returns (stream ImageJoinStreamingResponse);
  rpc ImageDelete(ImageDeleteRequest) returns (Empty);
  rpc ImageFromId(ImageFromIdRequest) returns (ImageFromIdResponse);
  rpc ImagePublish(ImagePublishRequest) returns (ImagePublishResponse);
  rpc ImageGetByTag(ImageGetByTagRequest) returns (ImageGetByTagResponse);
  rpc SandboxCreateV2(SandboxCreateV2Request) returns (SandboxCreateV2Response);
  rpc SandboxGetTaskIdV2(SandboxGetTaskIdRequest) returns (SandboxGetTaskIdResponse);
  rpc SandboxGetCommandRouterAccess(SandboxGetCommandRouterAccessRequest) returns (SandboxGetCommandRouterAccessResponse);
  rpc SandboxListV2(SandboxListRequest) returns (SandboxListResponse);
  rpc SandboxTerminateV2(SandboxTerminateRequest) returns (SandboxTerminateResponse);
  rpc SandboxWaitV2(SandboxWaitRequest) returns (SandboxWaitResponse);
  rpc SandboxTagsGetV2(SandboxTagsGetRequest) returns (SandboxTagsGetResponse);
  rpc EnvironmentList(Empty) returns (EnvironmentListResponse);
  rpc SecretGetOrCreate(SecretGetOrCreateRequest) returns (SecretGetOrCreateResponse);
  rpc SandboxCreate(SandboxCreateRequest) returns (SandboxCreateResponse);
  rpc SandboxGetTaskId(SandboxGetTaskIdRequest) returns (SandboxGetTaskIdResponse);
  rpc TaskGetCommandRouterAccess(TaskGetCommandRouterAccessRequest) returns (TaskGetCommandRouterAccessResponse);
  rpc SandboxWait(SandboxWaitRequest) returns (SandboxWaitResponse);
  rpc SandboxTerminate(SandboxTerminateRequest) returns (SandboxTerminateResponse);
  rpc SandboxTagsGet(SandboxTagsGetRequest) returns (SandboxTagsGetResponse);
  rpc SandboxTagsSet(SandboxTagsSetRequest) returns (Empty);
  rpc SandboxTagsSetV2(SandboxTagsSetRequest) returns (Empty);
}
`;

const ROUTER_PROTO = `
syntax = "proto3";
package modal.task_command_router;

enum TaskExecStdioFileDescriptor { TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT = 0; TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR = 1; }
message TaskExecStartRequest {
  string task_id = 1;
  string exec_id = 2;
  repeated string command_args = 3;
  optional uint32 timeout_secs = 6;
  optional string workdir = 7;
  map<string, string> env = 12;
  repeated modal.client.SecretSource secret_sources = 13;
}
message TaskExecStartResponse {}
message TaskExecStdioReadRequest { string task_id = 1; string exec_id = 2; uint64 offset = 3; TaskExecStdioFileDescriptor file_descriptor = 4; }
message TaskExecStdioReadResponse { bytes data = 1; }
message TaskExecStdinWriteRequest { string task_id = 1; string exec_id = 2; uint64 offset = 3; bytes data = 4; bool eof = 5; }
message TaskExecStdinWriteResponse {}
message TaskExecWaitRequest { string task_id = 1; string exec_id = 2; }
message TaskExecWaitResponse { oneof exit_status { int32 code = 1; int32 signal = 2; } }
message TaskSnapshotFilesystemRequest { string task_id = 1; string snapshot_id = 2; }
message TaskSnapshotFilesystemResponse { string image_id = 1; }
message TaskSetNetworkAccessRequest { string task_id = 1; modal.client.NetworkAccess network_access = 2; }
message TaskSetNetworkAccessResponse {}

service TaskCommandRouter {
  rpc TaskExecStart(TaskExecStartRequest) returns (TaskExecStartResponse);
  rpc TaskExecStdioRead(TaskExecStdioReadRequest) returns (stream TaskExecStdioReadResponse);
  rpc TaskExecStdinWrite(TaskExecStdinWriteRequest) returns (TaskExecStdinWriteResponse);
  rpc TaskExecWait(TaskExecWaitRequest) returns (TaskExecWaitResponse);
  rpc TaskExecPoll(TaskExecWaitRequest) returns (TaskExecWaitResponse);
  rpc TaskSnapshotFilesystem(TaskSnapshotFilesystemRequest) returns (TaskSnapshotFilesystemResponse);
  rpc TaskSetNetworkAccess(TaskSetNetworkAccessRequest) returns (TaskSetNetworkAccessResponse);
}
`;

/** Messages as plain objects: camelCase keys, 64-bit numbers as JS numbers, bytes as Buffers, defaults filled in. */
export type Message = Record<string, unknown>;

const root = new protobuf.Root();
protobuf.parse(PROTO, root);
protobuf.parse(ROUTER_PROTO, root);
root.resolveAll();

/** A gRPC service definition of one of the services above, for grpc-js's Server.addService. */
export function serviceDefinition(name: 'modal.client.ModalClient' | 'modal.task_command_router.TaskCommandRouter') {
  const service = root.lookupService(name);
  const definition: Record<string, ServiceDefinition[string]> = {};
  for (const method of service.methodsArray) {
    const request = root.lookupType(method.resolvedRequestType!.fullName);
    const response = root.lookupType(method.resolvedResponseType!.fullName);
    definition[method.name] = {
      path: `/${name}/${method.name}`,
      requestStream: Boolean(method.requestStream),
      responseStream: Boolean(method.responseStream),
      requestSerialize: (value: Message) => Buffer.from(request.encode(request.fromObject(value)).finish()),
      requestDeserialize: (bytes: Buffer) =>
        request.toObject(request.decode(bytes), { longs: Number, defaults: true, oneofs: true }),
      responseSerialize: (value: Message) => Buffer.from(response.encode(response.fromObject(value)).finish()),
      responseDeserialize: (bytes: Buffer) => response.toObject(response.decode(bytes)),
    };
  }
  return definition as ServiceDefinition;
}

/**
 * Modal's throttle reply: RESOURCE_EXHAUSTED whose `grpc-status-details-bin` trailer holds a google.rpc.Status with a
 * `modal.client.RPCRetryPolicy` detail; the SDK's control-plane retry middleware then waits `retry_after_secs` and
 * calls again by itself (`getServerRetryPolicy` and `retryMiddleware` in the `modal` JS SDK, up to
 * MODAL_MAX_THROTTLE_WAIT).
 */
export function throttleError(details: string, retryAfterSecs: number): Error {
  const policy = root.lookupType('modal.client.RPCRetryPolicy');
  const statusType = root.lookupType('modal.client.RPCStatus');
  const status = statusType.encode(
    statusType.fromObject({
      code: 8,
      message: details,
      details: [
        {
          typeUrl: 'type.googleapis.com/modal.client.RPCRetryPolicy',
          value: policy.encode(policy.fromObject({ retryAfterSecs })).finish(),
        },
      ],
    })
  );
  const metadata = new Metadata();
  metadata.set('grpc-status-details-bin', Buffer.from(status.finish()));
  return Object.assign(grpcError(8, details), { metadata });
}

/** A gRPC error of the given status code (grpc-js sends `code` and `details`). */
export function grpcError(code: number, details: string): Error {
  return Object.assign(new Error(details), { code, details });
}
