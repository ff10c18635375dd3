"""docker-compose.yml, checked without a Docker engine.

The file is validated against the Compose Specification's JSON schema (vendored in
tests/data, source noted there), then against what the stack needs and what the code reads:
pinned images, existing services and volumes, health checks, one JWT secret, one
TOPIC_LINEAGE_HOME everywhere (a bucket of the object store service, no shared data volume),
one Iceberg catalog on the stack's PostgreSQL, no secret on a command line, the connections and
Variable the DAGs look up, and only Airflow options that exist.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

from topic_lineage import tables
from topic_lineage.airflow import config as airflow_config
from topic_lineage.topic_id import is_canonical

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
SCHEMA = Path(__file__).parent / "data" / "compose-spec.json"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)
SPARK_SERVICES = ("spark-master", "spark-worker")
DATA_SERVICES = AIRFLOW_SERVICES + ("spark-worker",)
"""Every service that reads or writes TOPIC_LINEAGE_HOME (the executors write versions too)."""
ONE_SHOT_SERVICES = ("airflow-init", "object-store-init", "catalog-init")
OBJECT_STORE = "seaweedfs"
TL_HOME = "s3://topic-lineage/home"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())  # resolves the x-... anchors and << merges


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with no .env file: the default."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value).replace("$$", "$")


def airflow_options() -> dict[str, set[str]]:
    """Every ``[section] option`` Airflow 3.3 documents (its config template, read as YAML)."""
    spec = importlib.util.find_spec("airflow")
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates" / "config.yml"
    sections = yaml.safe_load(template.read_text())
    return {name.lower(): {opt.lower() for opt in body["options"]} for name, body in sections.items()}


# --- the specification --------------------------------------------------------------------
def test_matches_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_rejects_a_broken_file(compose):
    """The vendored schema is strict enough to catch a typo'd key (so the test above can fail)."""
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["kafka"]["helthcheck"] = broken["services"]["kafka"].pop("healthcheck")
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def test_variables_all_have_defaults():
    """`docker compose up` works without a .env file: every ${VAR} has a :- default."""
    text = COMPOSE_FILE.read_text()
    references = re.findall(r"(?<!\$)\$\{([^}]*)\}", text)
    assert references, "expected ${...} defaults for the secrets"
    for reference in references:
        assert re.fullmatch(r"[A-Z0-9_]+:-[^}]+", reference), reference
    assert not re.search(r"(?<!\$)\$[A-Za-z_]", text), "bare $VAR: write $$VAR for the container"


# --- images, references, health ---------------------------------------------------------------
def test_every_image_is_pinned(services):
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name} has no image"
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert tag != "latest", f"{name}: image {image!r} uses :latest"
        if "build" not in service:  # pulled from a registry: a real version, not a moving name
            assert re.match(r"^\d+(\.\d+)+", tag), f"{name}: {image!r} is not pinned to a version"


def test_the_stack_has_its_parts(services):
    assert (set(AIRFLOW_SERVICES) | set(SPARK_SERVICES) | set(ONE_SHOT_SERVICES)
            | {"kafka", "postgres", OBJECT_STORE}) <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["postgres"]["image"].startswith("postgres:")
    # the object store we ship is SeaweedFS (Apache-2.0), its S3 gateway on
    assert services[OBJECT_STORE]["image"].startswith("chrislusf/seaweedfs:")
    assert "-s3" in services[OBJECT_STORE]["command"][-1].split()
    commands = {name: services[name].get("command") for name in AIRFLOW_SERVICES[1:]}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }


def test_kafka_is_the_version_the_demo_and_the_tests_run(services):
    """The stack's Kafka is the local broker's default version (what the demo and the tests
    run), so what was tested is what Compose runs."""
    from topic_lineage.local.kafka_dist import DEFAULT_VERSION

    assert services["kafka"]["image"] == f"apache/kafka:{DEFAULT_VERSION}"


def test_seaweedfs_is_the_release_the_tests_run(services):
    """The stack's SeaweedFS (the object store and its one-shot bucket maker) is the release whose
    ``weed`` the tests build from source and run (tests/servers/seaweedfs_dist.py;
    tests/test_s3_server.py checks the binary says so). Since 4.x its image's entrypoint runs
    ``weed`` as the user ``seaweed``: the identities file, written 0600 as root, is handed to it."""
    from tests.servers.seaweedfs_dist import RELEASE

    images = {name: service["image"] for name, service in services.items()
              if service["image"].startswith("chrislusf/seaweedfs:")}
    assert set(images) == {OBJECT_STORE, "object-store-init"}
    assert set(images.values()) == {f"chrislusf/seaweedfs:{RELEASE}"}, images
    store = services[OBJECT_STORE]["command"][-1]
    config = re.search(r"-s3\.config=(\S+)", store).group(1)
    assert re.search(rf"chown seaweed:seaweed {re.escape(config)}\b", store)
    assert store.index("chown seaweed") < store.index("exec /entrypoint.sh server")


def test_kafka_runs_in_kraft_mode(services):
    env = environment(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in key for key in env)
    node, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert node == env["KAFKA_NODE_ID"]
    assert voter.split(":")[0] == services["kafka"].get("hostname", "kafka")
    assert is_canonical(env["CLUSTER_ID"]), "KRaft needs a Uuid-form cluster ID"


def test_every_reference_exists(compose, services):
    declared_volumes = set(compose.get("volumes") or {})
    used_volumes = set()
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        for other in depends:
            assert other in services, f"{name} depends on unknown service {other}"
            assert other != name
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume["source"]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name} mounts undeclared volume {source}"
                used_volumes.add(source)
        for network in service.get("networks") or []:
            assert network in (compose.get("networks") or {}), f"{name}: unknown network {network}"
        build = service.get("build")
        if build:
            assert (REPO / build["context"] / build["dockerfile"]).is_file()
    assert declared_volumes == used_volumes, "declared volumes nobody mounts"


def test_dependencies_wait_for_health(services):
    """A service waited on `service_healthy` has a health check; init must finish first."""
    for name, service in services.items():
        for other, rule in (service.get("depends_on") or {}).items():
            if rule.get("condition") == "service_healthy":
                assert "healthcheck" in services[other], f"{name} waits on {other}'s health"
    for name in AIRFLOW_SERVICES[1:]:
        depends = services[name]["depends_on"]
        for one_shot in ONE_SHOT_SERVICES:
            assert depends[one_shot]["condition"] == "service_completed_successfully", (name, one_shot)
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends[OBJECT_STORE]["condition"] == "service_healthy"
    # the executors write into the bucket: it must exist before the worker takes tasks
    worker = services["spark-worker"]["depends_on"]
    assert worker["object-store-init"]["condition"] == "service_completed_successfully"
    assert services["object-store-init"]["depends_on"][OBJECT_STORE]["condition"] == "service_healthy"
    assert services["catalog-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_every_long_running_service_has_a_health_check(services):
    for name, service in services.items():
        if name in ONE_SHOT_SERVICES:
            assert service.get("restart") == "no", name
            continue
        check = service.get("healthcheck")
        assert check and check.get("test"), f"{name} has no health check"


def test_host_ports_are_unique(services):
    ports = [str(p).split(":")[0] for s in services.values() for p in s.get("ports") or []]
    assert len(ports) == len(set(ports))


# --- what the code reads ----------------------------------------------------------------------
def test_airflow_components_share_one_configuration(services):
    envs = {name: environment(services[name]) for name in AIRFLOW_SERVICES}
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET_CMD", "AIRFLOW__API__SECRET_KEY_CMD",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                "AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW__CORE__AUTH_MANAGER"):
        assert len({env[key] for env in envs.values()}) == 1, key
    database = urlparse(interpolate(envs["airflow-scheduler"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]))
    assert database.scheme.startswith("postgresql") and database.hostname == "postgres"
    execution = urlparse(envs["airflow-scheduler"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert execution.hostname == "airflow-apiserver" and execution.path == "/execution/"
    assert "8080:8080" in services["airflow-apiserver"]["ports"]


def test_airflow_options_exist():
    """Every AIRFLOW__SECTION__KEY is an option Airflow (or topic-lineage's section) knows."""
    options = airflow_options()
    options[airflow_config.CONFIG_SECTION] = set(airflow_config.CONFIG_DEFAULTS)
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    keys = {key for s in compose["services"].values() for key in environment(s)}
    airflow_keys = sorted(k for k in keys if k.startswith("AIRFLOW__"))
    assert airflow_keys
    for key in airflow_keys:
        section, option = key[len("AIRFLOW__"):].lower().split("__", 1)
        if option.endswith("_cmd") and option not in options.get(section, set()):
            option = option.removesuffix("_cmd")  # <option>_cmd: only for sensitive options
            assert (section, option) in SENSITIVE_OPTIONS, f"{key}: [{section}] {option} has no _cmd"
        assert option in options.get(section, set()), f"{key}: no option [{section}] {option}"


def sensitive_options() -> set[tuple[str, str]]:
    spec = importlib.util.find_spec("airflow")
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates" / "config.yml"
    sections = yaml.safe_load(template.read_text())
    return {(name.lower(), opt.lower()) for name, body in sections.items()
            for opt, desc in body["options"].items() if desc.get("sensitive")}


SENSITIVE_OPTIONS = sensitive_options()


def test_airflow_needs_a_real_login(services):
    """A login with a generated password; the JWT secret (64 random bytes) and the API secret
    key generated on first start into the shared auth volume, not fixed in this file."""
    text = COMPOSE_FILE.read_text()
    env = environment(services["airflow-apiserver"])
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith(".SimpleAuthManager")
    assert env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "false").lower() == "false"
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    auth_dir = str(Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]).parent)
    assert "AIRFLOW__API_AUTH__JWT_SECRET" not in env and "AIRFLOW__API__SECRET_KEY" not in env
    assert env["AIRFLOW__API_AUTH__JWT_SECRET_CMD"] == f"cat {auth_dir}/jwt_secret"
    assert env["AIRFLOW__API__SECRET_KEY_CMD"] == f"cat {auth_dir}/api_secret_key"
    for name in AIRFLOW_SERVICES:
        assert any(v.endswith(":" + auth_dir) for v in services[name]["volumes"]), name
    init = services["airflow-init"]["command"][-1]
    assert "umask 077" in init
    assert "secrets.token_urlsafe(64))' > jwt_secret" in init
    assert "secrets.token_urlsafe(32))' > api_secret_key" in init
    assert '{"admin": secrets.token_urlsafe(18)}, open("passwords.json", "w")' in init
    assert "ADMIN_PASSWORD" not in text and "JWT_SECRET:" not in text


def mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each volume a service mounts."""
    pairs = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        pairs.append((source, target))
    return pairs


def test_topic_lineage_home_is_a_bucket_of_the_object_store(services):
    """The data lives in the object store, not on a volume the containers share: every Airflow
    component and the Spark worker name the same s3:// home, reach the seaweedfs service's S3
    gateway with the key pair its identities file is written from, and the bucket is made by
    the one-shot object-store-init before any of them starts."""
    homes = {name: environment(services[name])[tables.HOME_ENV] for name in DATA_SERVICES}
    assert set(homes.values()) == {TL_HOME}, homes
    bucket = urlparse(TL_HOME).netloc
    assert f"s3.bucket.create -name {bucket}" in services["object-store-init"]["command"][-1]
    store = services[OBJECT_STORE]
    s3_port = re.search(r"-s3\.port=(\d+)", store["command"][-1]).group(1)
    store_env = environment(store)
    for name in DATA_SERVICES:
        env = environment(services[name])
        endpoint = urlparse(env["AWS_ENDPOINT_URL_S3"])
        assert (endpoint.hostname, str(endpoint.port)) == (OBJECT_STORE, s3_port), name
        assert env["AWS_REGION"], name
        # the same .env variables as the identities file, so the pair always matches
        assert env["AWS_ACCESS_KEY_ID"] == store_env["S3_ACCESS_KEY"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == store_env["S3_SECRET_KEY"], name
    assert "$${S3_ACCESS_KEY}" in store["command"][-1] and "$${S3_SECRET_KEY}" in store["command"][-1]
    assert f"127.0.0.1:{s3_port}:{s3_port}" in store["ports"], "the S3 gateway is for this host only"


def test_no_data_volume_is_shared_between_airflow_and_spark(compose, services):
    """Nothing mounts a volume at the old home path, and no named volume is mounted by both an
    Airflow component and a Spark container: the bucket is the only place they share."""
    airflow_volumes, spark_volumes = set(), set()
    for name in AIRFLOW_SERVICES:
        airflow_volumes |= {source for source, _ in mounts(services[name])}
    for name in SPARK_SERVICES:
        spark_volumes |= {source for source, _ in mounts(services[name])}
    assert not airflow_volumes & spark_volumes, airflow_volumes & spark_volumes
    for name, service in services.items():
        assert all(target != "/var/lib/topic-lineage" for _, target in mounts(service)), name
    assert "topic-lineage-home" not in (compose.get("volumes") or {})


def test_the_iceberg_catalog_is_the_sql_catalog_on_postgres(services):
    """With the home on object storage the embedded SQLite catalog cannot be used: every data
    service names one pyiceberg SQL catalog in the database that catalog-init creates on the
    stack's PostgreSQL, with its warehouse under the home and the same S3 endpoint."""
    from topic_lineage.warehouse import iceberg

    envs = [environment(services[name]) for name in DATA_SERVICES]
    names = {env[iceberg.CATALOG_ENV] for env in envs}
    assert len(names) == 1
    name = names.pop()
    assert "_" not in name, "pyiceberg turns _ in a catalog name given by variables into -"
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    catalogs = {tuple(sorted((k, v) for k, v in env.items() if k.startswith(prefix))) for env in envs}
    assert len(catalogs) == 1, "every data service must see the same catalog"
    catalog = dict(catalogs.pop())
    assert catalog[prefix + "TYPE"] == "sql"
    uri = urlparse(interpolate(catalog[prefix + "URI"]))
    assert uri.scheme == "postgresql+psycopg2" and uri.hostname == "postgres"
    database = uri.path.lstrip("/")
    assert database and database != "airflow", "the catalog has a database of its own"
    init = services["catalog-init"]["command"][-1]
    assert f"datname = '{database}'" in init and f"CREATE DATABASE {database}" in init
    assert catalog[prefix + "WAREHOUSE"].startswith(TL_HOME + "/")
    assert catalog[prefix + "S3__ENDPOINT"] == envs[0]["AWS_ENDPOINT_URL_S3"]


def _command_lines(service: dict) -> list[str]:
    lines = []
    for key in ("command", "entrypoint"):
        value = service.get(key)
        if value:
            lines.append(" ".join(value) if isinstance(value, list) else str(value))
    test = (service.get("healthcheck") or {}).get("test")
    if test:
        lines.append(" ".join(test) if isinstance(test, list) else str(test))
    return lines


def test_no_secret_is_on_a_command_line(services):
    """Airflow's event log records CLI command lines and `ps` shows them to every user: a
    command, entrypoint or health check never contains a Compose-interpolated value (which
    Compose would substitute into the command line) nor the default of a secret key."""
    text = COMPOSE_FILE.read_text()
    secret_defaults = {default for name, default in re.findall(r"(?<!\$)\$\{([A-Z0-9_]+):-([^}]+)\}", text)
                       if "SECRET" in name}
    assert secret_defaults, "expected development defaults for the secrets"
    for name, service in services.items():
        for line in _command_lines(service):
            assert not re.search(r"(?<!\$)\$\{", line), f"{name}: a ${{...}} on a command line"
            for secret in secret_defaults:
                assert secret not in line, f"{name}: a secret on a command line"
    store = services[OBJECT_STORE]["command"][-1]
    assert "umask 077" in store and "-s3.config=" in store, "identities file written 0600"
    assert "PGPASSWORD" in environment(services["catalog-init"])


def test_topic_lineage_variables_are_read_by_the_code(services):
    """Each TOPIC_LINEAGE_* variable set here is one the package actually reads."""
    sources = "\n".join(p.read_text() for p in (REPO / "topic_lineage").rglob("*.py"))
    names = {k for s in services.values() for k in environment(s) if k.startswith("TOPIC_LINEAGE_")}
    assert tables.HOME_ENV in names
    for name in names:
        assert f'"{name}"' in sources, f"{name} is set but no code reads it"


def test_connections_and_variable_match_the_dags(services):
    env = environment(services["airflow-scheduler"])
    kafka_key = "AIRFLOW_CONN_" + airflow_config.DEFAULT_KAFKA_CONN_ID.upper()
    spark_key = "AIRFLOW_CONN_" + airflow_config.SPARK_CONN_ID.upper()
    kafka = json.loads(env[kafka_key])
    assert kafka["conn_type"] == "kafka"
    host, port = kafka["extra"]["bootstrap.servers"].split(":")
    advertised = environment(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    assert f"PLAINTEXT://{host}:{port}" in advertised.split(",")
    spark = json.loads(env[spark_key])
    assert spark["conn_type"] == "spark"
    master_url = f"{spark['host']}:{spark['port']}"
    assert env["TOPIC_LINEAGE_SPARK_MASTER"] == master_url
    master_command = services["spark-master"]["command"]
    assert master_command[master_command.index("--port") + 1] == str(spark["port"])
    assert master_url in services["spark-worker"]["command"]
    clusters = json.loads(env["AIRFLOW_VAR_" + airflow_config.CLUSTERS_VARIABLE.upper()])
    for cluster in clusters:
        assert "AIRFLOW_CONN_" + cluster["conn_id"].upper() in env, cluster
    init_script = " ".join(services["airflow-init"]["command"])
    assert f"airflow pools set {airflow_config.PUBLISH_POOL} 1" in init_script
    assert "airflow db migrate" in init_script
    for option in (k for k in env if k.startswith("AIRFLOW__TOPIC_LINEAGE__")):
        assert option.split("__")[-1].lower() in airflow_config.CONFIG_DEFAULTS


def test_dockerfile_builds_what_compose_expects(services):
    text = DOCKERFILE.read_text()
    lock = (REPO / "requirements.lock").read_text()
    airflow_pin = re.search(r"^apache-airflow==([0-9.]+)$", lock, flags=re.MULTILINE).group(1)
    base = re.search(r"ARG AIRFLOW_IMAGE=(\S+)", text).group(1)
    assert base == f"apache/airflow:{airflow_pin}-python3.11"
    assert re.findall(r"^FROM (.+)$", text, flags=re.MULTILINE) == [
        "${AIRFLOW_IMAGE} AS wheel", "${AIRFLOW_IMAGE}"]
    assert f'"apache-airflow=={airflow_pin}"' in text
    for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", text, flags=re.MULTILINE):
        for path in source.split():
            assert (REPO / path).exists(), f"Dockerfile copies missing {path}"
    env = environment(services["airflow-scheduler"])
    assert f"dags {env['AIRFLOW__CORE__DAGS_FOLDER']}" in text
    # the plugins folder is empty: the plugin is the package's entry point
    assert f"mkdir -p /var/lib/topic-lineage /opt/airflow/auth {env['AIRFLOW__CORE__PLUGINS_FOLDER']}" in text
    assert not re.search(r"^COPY .*plugins", text, flags=re.MULTILINE)


def test_the_image_installs_the_wheel_as_users_do():
    """docs/airflow.md, "In your own Airflow": a wheel built from the checkout, installed (not
    editable) with the lock as constraints; the GX context comes with the package."""
    text = DOCKERFILE.read_text()
    stages = re.split(r"^FROM .*$", text, flags=re.MULTILINE)[1:]
    wheel_stage, image = stages
    assert re.search(r"^RUN pip wheel .*--no-deps .*--wheel-dir (\S+)", wheel_stage, flags=re.MULTILINE)
    dist = re.search(r"--wheel-dir (\S+)", wheel_stage).group(1)
    assert f"COPY --from=wheel {dist} {dist}" in image
    install = re.search(r"^RUN pip install (.+?)(?<!\\)$", image,
                        flags=re.MULTILINE | re.DOTALL).group(1)
    assert "--constraint /home/airflow/requirements.lock" in install
    assert f"{dist}/topic_lineage-*.whl" in install
    assert "--editable" not in text and " -e " not in text
    # then the archive of Spark's classes, for the image's JDK and jars, where user airflow writes
    assert image.index("RUN topic-lineage jvm-archive") > image.index("RUN pip install")
    archive_dir = re.search(r"^ENV TOPIC_LINEAGE_JVM_ARCHIVE=(\S+)$", image, flags=re.MULTILINE).group(1)
    assert archive_dir.startswith("/home/airflow/")
    assert "expectations" not in text and "GX_CONTEXT" not in text
    compose = COMPOSE_FILE.read_text()
    assert "TOPIC_LINEAGE_GX_CONTEXT" not in compose
