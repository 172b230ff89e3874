"""The deployment files in cluster/deploy: the cluster-launcher YAML passes Ray's own
schema, and both it and the KubeRay manifest run the pinned Ray with Java 17 and this
project's Spark extra, with worker nodes spread."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import ray
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "cluster" / "deploy"


def _launcher() -> dict:
    return yaml.safe_load((DEPLOY / "ray-cluster.yaml").read_text())


def test_cluster_launcher_config_passes_rays_schema():
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(_launcher())))
    bad = _launcher()
    bad["setup_comands"] = bad.pop("setup_commands")  # a typo must not pass
    with pytest.raises(Exception, match="setup_comands"):
        validate_config(prepare_config(bad))


def test_every_image_runs_the_pinned_ray_with_java_and_the_spark_extra():
    cfg = _launcher()
    assert cfg["docker"]["image"].startswith(f"rayproject/ray:{ray.__version__}-")
    setup = "\n".join(cfg["setup_commands"])
    assert "openjdk-17-jre-headless" in setup and "[spark" in setup
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(rf"^FROM rayproject/ray:{re.escape(ray.__version__)}-", docker, re.M)
    assert "openjdk-17-jre-headless" in docker and "[spark" in docker

    rc = yaml.safe_load((DEPLOY / "kuberay-raycluster.yaml").read_text())
    assert (rc["apiVersion"], rc["kind"]) == ("ray.io/v1", "RayCluster")
    assert rc["spec"]["rayVersion"] == ray.__version__
    pods = [rc["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in rc["spec"]["workerGroupSpecs"]]
    images = {c["image"] for p in pods for c in p["containers"]}
    assert len(images) == 1  # head and workers run the same code
    for p in pods:
        for c in p["containers"]:
            assert {"name": "JAVA_HOME", "value": "/usr/lib/jvm/java-17-openjdk-amd64"} in c["env"]
    (workers,) = rc["spec"]["workerGroupSpecs"]
    anti = workers["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= workers["template"]["metadata"][
        "labels"].items()
