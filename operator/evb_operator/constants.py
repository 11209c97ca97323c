"""Names, ports, labels, annotations and environment variables shared by the operator's modules:
each is spelled here once (names as templates the modules format), never again elsewhere."""

from __future__ import annotations

from evb_operator import crd

API_VERSION = f"{crd.GROUP}/{crd.VERSION}"

ORDERER_NAME = "{name}-orderer"
"""StatefulSet, Service and NetworkPolicy of an EventBuilder's orderer."""
CONFIG_NAME = "{name}-orderer-config"
"""ConfigMap holding the ``evb serve --config`` file."""
SPARK_NAME = "{name}-spark"
"""SparkApplication of the Spark job."""
FORWARD_NAME = "{name}-forward"
"""Deployment of the forwarders of spec.upstreams."""
HEADLESS_NAME = "{name}-orderer-headless"
"""Headless Service of a run over several orderers (spec.orderers > 1): it governs the
StatefulSet, so that orderer k has the stable name ``{name}-orderer-k.{name}-orderer-headless``."""
RELEASE_NAME = "{name}-release"
"""Deployment of ``evb release`` (the release of dead sources) of a run over several orderers."""
LIVE_NAME = "{name}-live"
"""Service of the Spark job's live page (spec.spark.ui). Not ``{name}-spark-ui``: the Spark
operator names its Service of Spark's own web UI ``{name}-spark-ui-svc``."""

ENDPOINT = "{orderer}.{namespace}.svc:{port}"
"""The orderer's gRPC address as the operator and the Spark job reach it."""
PEER_ENDPOINT = "{pod}.{service}.{namespace}.svc:{port}"
"""Orderer k's own gRPC address in a run over several (``pod`` is ``{name}-orderer-k``,
``service`` the headless Service)."""

GRPC_PORT = 50051
LIVENESS_SERVICE = "liveness"
"""gRPC health service name that is NOT_SERVING only when the orderer failed (it then exits);
a full log volume leaves it SERVING, so the kubelet does not restart a pod that a restart
cannot cure (readiness, on the overall status "", takes it out of the Service instead)."""
METRICS_PORT = 9090
LIVE_PORT_NAME = "live-page"
"""The name of the Spark driver's container port of the live page (the page's Service names its
port the same)."""
LIVE_LISTEN = "0.0.0.0:{port}"
"""The live page's ``evb spark-job --ui`` in the driver: every interface (the job's default is
loopback), so that the Service reaches it."""
LIVE_URL = "http://{service}.{namespace}.svc:{port}/"
"""Where the live page is inside the cluster (``status.spark.ui``)."""
SPARK_ROLE_LABEL = "spark-role"
SPARK_DRIVER_ROLE = "driver"
"""The label Spark puts on the pods it runs (``spark-role: driver`` or ``executor``): the live
page's Service selects the driver by it, among the Spark job's pods."""

CONFIG_FILE = "evb.yaml"
CONFIG_DIR = "/etc/evb/config"
DATA_DIR = "/data"
TLS_DIR = "/etc/evb/tls"
"""The orderer's TLS Secret (tls.crt, tls.key, ca.crt); in the Spark pods only its ca.crt."""
CLIENT_TLS_DIR = "/etc/evb/client-tls"
"""The Spark pods' client certificate (spec.tls.clientSecretName) under mutual TLS."""
AUTH_DIR = "/etc/evb/auth"
"""The bearer token (spec.auth.tokenSecretRef), as the file ``token``."""
TOKEN_FILE = "token"
STAGES_DIR = "/etc/evb/stages"
"""The Spark driver's mount of the ConfigMap of spec.spark.stages: the file is
``STAGES_DIR/<key>`` (``evb spark-job --stages``); the executors get the stages' functions
pickled by value, not the file."""
SPARK_JOB_FILE = "local:///opt/evb/orderer/spark/driver/job.py"
"""The Spark job inside the Spark image (``Dockerfile.spark``); the job is issue 4's."""
SPARK_CONNECT_TIMEOUT_SECONDS = 300
"""How long the Spark job waits for the orderer at its start: the operator creates both at once,
and the orderer's volume may still be provisioning when the driver starts."""
RELEASE_CONNECT_TIMEOUT_SECONDS = SPARK_CONNECT_TIMEOUT_SECONDS
"""How long ``evb release`` waits for each orderer, at its start and in each look: the same
reason (created with the orderers); a round waiting on an orderer releases nothing anyway."""
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""The label the StatefulSet controller puts on each pod: its ordinal (Kubernetes 1.28 and
later, KEP-4017; the chart asks for 1.29)."""
ENV_ORDERER_INDEX = "EVB_ORDERER_INDEX"
"""The orderer pod's variable holding its ordinal (from :data:`POD_INDEX_LABEL`), which the
kubelet puts into ``--orderer-index $(EVB_ORDERER_INDEX)``."""
ENV_AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
ENV_AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
ENV_AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"
"""The variables the AWS SDK reads (and s3a through it), set in the Spark pods from the Secret
``spec.spark.objectStorage.credentialsSecret``."""
S3A_ENV_CREDENTIALS_PROVIDER = (
    "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
)
"""s3a's credential provider (AWS SDK v2, as hadoop-aws 3.4 and later use) reading those
variables."""
STOP_GRACE_SECONDS = 10.0
TERMINATION_GRACE_SECONDS = 30
"""The pod's terminationGracePeriodSeconds; the server's stop grace stays below it."""
RUN_AS_USER = 10001

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "evb-operator"

ANNOTATION_ENDPOINT_OVERRIDE = f"{crd.GROUP}/endpoint-override"
"""Per-EventBuilder gRPC address used instead of the Service's; honoured only when the operator
runs with ``EVB_ALLOW_ENDPOINT_OVERRIDE=1`` (tests, port-forwards), never by default: whoever may
edit an EventBuilder must not be able to point the operator at any address."""

ENV_ALLOW_ENDPOINT_OVERRIDE = "EVB_ALLOW_ENDPOINT_OVERRIDE"
ENV_ORDERER_IMAGE = "EVB_ORDERER_IMAGE"
"""Default orderer image (the chart sets it to the operator's own image)."""
ENV_SPARK_IMAGE = "EVB_SPARK_IMAGE"
"""Default Spark job image."""
ENV_STATS_INTERVAL = "EVB_STATS_INTERVAL"
"""Seconds between two status updates from GetStats (default 10)."""
DEFAULT_ORDERER_IMAGE = "evb:0.1.0"
"""Built by ``docker build -t evb:0.1.0 .``; the chart passes its own image instead."""
DEFAULT_SPARK_IMAGE = "evb-spark:0.1.0"
"""Built by ``docker build -f Dockerfile.spark -t evb-spark:0.1.0 .``."""
ENV_OPERATOR_NAMESPACE = "EVB_OPERATOR_NAMESPACE"
"""The operator's own namespace (downward API): a NetworkPolicy lets the operator in from it."""
ENV_OPERATOR_POD_LABELS = "EVB_OPERATOR_POD_LABELS"
"""The operator pod's selector labels, ``k=v,k=v`` (the chart sets them): a NetworkPolicy lets
only those pods of the operator's namespace in; unset: the whole operator namespace."""
