from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PodSandboxMetadata(_message.Message):
    __slots__ = ("name", "uid", "namespace", "attempt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: str
    namespace: str
    attempt: int
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[str] = ..., namespace: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class HugepageLimit(_message.Message):
    __slots__ = ("page_size", "limit")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    page_size: str
    limit: int
    def __init__(self, page_size: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class LinuxContainerResources(_message.Message):
    __slots__ = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes", "oom_score_adj", "cpuset_cpus", "cpuset_mems", "hugepage_limits", "unified", "memory_swap_limit_in_bytes")
    class UnifiedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CPU_PERIOD_FIELD_NUMBER: _ClassVar[int]
    CPU_QUOTA_FIELD_NUMBER: _ClassVar[int]
    CPU_SHARES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_SCORE_ADJ_FIELD_NUMBER: _ClassVar[int]
    CPUSET_CPUS_FIELD_NUMBER: _ClassVar[int]
    CPUSET_MEMS_FIELD_NUMBER: _ClassVar[int]
    HUGEPAGE_LIMITS_FIELD_NUMBER: _ClassVar[int]
    UNIFIED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SWAP_LIMIT_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_period: int
    cpu_quota: int
    cpu_shares: int
    memory_limit_in_bytes: int
    oom_score_adj: int
    cpuset_cpus: str
    cpuset_mems: str
    hugepage_limits: _containers.RepeatedCompositeFieldContainer[HugepageLimit]
    unified: _containers.ScalarMap[str, str]
    memory_swap_limit_in_bytes: int
    def __init__(self, cpu_period: _Optional[int] = ..., cpu_quota: _Optional[int] = ..., cpu_shares: _Optional[int] = ..., memory_limit_in_bytes: _Optional[int] = ..., oom_score_adj: _Optional[int] = ..., cpuset_cpus: _Optional[str] = ..., cpuset_mems: _Optional[str] = ..., hugepage_limits: _Optional[_Iterable[_Union[HugepageLimit, _Mapping]]] = ..., unified: _Optional[_Mapping[str, str]] = ..., memory_swap_limit_in_bytes: _Optional[int] = ...) -> None: ...

class LinuxPodSandboxConfig(_message.Message):
    __slots__ = ("cgroup_parent", "overhead", "resources")
    CGROUP_PARENT_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    cgroup_parent: str
    overhead: LinuxContainerResources
    resources: LinuxContainerResources
    def __init__(self, cgroup_parent: _Optional[str] = ..., overhead: _Optional[_Union[LinuxContainerResources, _Mapping]] = ..., resources: _Optional[_Union[LinuxContainerResources, _Mapping]] = ...) -> None: ...

class PodSandboxConfig(_message.Message):
    __slots__ = ("metadata", "hostname", "log_directory", "labels", "annotations", "linux")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    LOG_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    metadata: PodSandboxMetadata
    hostname: str
    log_directory: str
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    linux: LinuxPodSandboxConfig
    def __init__(self, metadata: _Optional[_Union[PodSandboxMetadata, _Mapping]] = ..., hostname: _Optional[str] = ..., log_directory: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., linux: _Optional[_Union[LinuxPodSandboxConfig, _Mapping]] = ...) -> None: ...

class RunPodSandboxRequest(_message.Message):
    __slots__ = ("config", "runtime_handler")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_HANDLER_FIELD_NUMBER: _ClassVar[int]
    config: PodSandboxConfig
    runtime_handler: str
    def __init__(self, config: _Optional[_Union[PodSandboxConfig, _Mapping]] = ..., runtime_handler: _Optional[str] = ...) -> None: ...

class RunPodSandboxResponse(_message.Message):
    __slots__ = ("pod_sandbox_id",)
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    def __init__(self, pod_sandbox_id: _Optional[str] = ...) -> None: ...

class StopPodSandboxRequest(_message.Message):
    __slots__ = ("pod_sandbox_id",)
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    def __init__(self, pod_sandbox_id: _Optional[str] = ...) -> None: ...

class StopPodSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ContainerMetadata(_message.Message):
    __slots__ = ("name", "attempt")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    name: str
    attempt: int
    def __init__(self, name: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class LinuxContainerConfig(_message.Message):
    __slots__ = ("resources",)
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    resources: LinuxContainerResources
    def __init__(self, resources: _Optional[_Union[LinuxContainerResources, _Mapping]] = ...) -> None: ...

class ContainerConfig(_message.Message):
    __slots__ = ("metadata", "labels", "annotations", "linux")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    metadata: ContainerMetadata
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    linux: LinuxContainerConfig
    def __init__(self, metadata: _Optional[_Union[ContainerMetadata, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., linux: _Optional[_Union[LinuxContainerConfig, _Mapping]] = ...) -> None: ...

class CreateContainerRequest(_message.Message):
    __slots__ = ("pod_sandbox_id", "config", "sandbox_config")
    POD_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_CONFIG_FIELD_NUMBER: _ClassVar[int]
    pod_sandbox_id: str
    config: ContainerConfig
    sandbox_config: PodSandboxConfig
    def __init__(self, pod_sandbox_id: _Optional[str] = ..., config: _Optional[_Union[ContainerConfig, _Mapping]] = ..., sandbox_config: _Optional[_Union[PodSandboxConfig, _Mapping]] = ...) -> None: ...

class CreateContainerResponse(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class StartContainerRequest(_message.Message):
    __slots__ = ("container_id",)
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    def __init__(self, container_id: _Optional[str] = ...) -> None: ...

class StartContainerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateContainerResourcesRequest(_message.Message):
    __slots__ = ("container_id", "linux", "annotations")
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    LINUX_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    linux: LinuxContainerResources
    annotations: _containers.ScalarMap[str, str]
    def __init__(self, container_id: _Optional[str] = ..., linux: _Optional[_Union[LinuxContainerResources, _Mapping]] = ..., annotations: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateContainerResourcesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VersionRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class VersionResponse(_message.Message):
    __slots__ = ("version", "runtime_name", "runtime_version", "runtime_api_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_NAME_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_API_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str
    def __init__(self, version: _Optional[str] = ..., runtime_name: _Optional[str] = ..., runtime_version: _Optional[str] = ..., runtime_api_version: _Optional[str] = ...) -> None: ...
