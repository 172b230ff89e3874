"""Spark on Ray (RayDP) with the JVM flags Java 17 needs (notes/raydp-java17.md)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from typing import Any

logger = logging.getLogger("storm_on_ray.spark")

#: ``java.base`` packages RayDP's JVMs must open on Java 17, or ``from_spark`` kills the
#: app master with ``InaccessibleObjectException``.
_OPEN_PACKAGES = (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
    "java.math", "java.text", "java.time", "java.util", "java.util.concurrent",
    "java.util.concurrent.atomic", "java.util.regex", "java.security", "sun.nio.ch",
    "sun.nio.cs", "sun.security.action", "sun.util.calendar", "jdk.internal.misc",
    "jdk.internal.ref")

JAVA_MISSING = ("Spark on Ray needs a Java runtime and `java` was not found on PATH. "
                "Install one, e.g. `apt-get install -y openjdk-17-jre-headless`, then retry.")


class SparkUnavailableError(RuntimeError):
    """Java or RayDP is missing; the message says how to install it."""


def java_add_opens() -> str:
    """The ``--add-opens`` flags, as one JVM options string."""
    return " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _OPEN_PACKAGES)


def check_java() -> str:
    """Return ``java -version``'s first line.

    Raises:
        SparkUnavailableError: no ``java`` on PATH (with the install command).
    """
    java = shutil.which("java")
    if java is None:
        raise SparkUnavailableError(JAVA_MISSING)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    return (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else java


def start_spark(app_name: str = "storm-on-ray", num_executors: int = 1,
                executor_cores: int = 1, executor_memory: str = "1GB",
                configs: dict[str, str] | None = None, **kwargs: Any):
    """Start a Spark session on Ray through RayDP, with the Java 17 flags; returns it.

    Ray must be initialised (``LocalCluster()`` does that). Slow (it starts Spark's JVMs), so
    start one and keep it: one Spark session per process is a RayDP rule; :func:`stop_spark`
    ends it.

    Raises:
        SparkUnavailableError: Java is missing, or the ``spark`` extra is not installed.
    """
    check_java()
    try:
        import raydp
    except ImportError as e:
        raise SparkUnavailableError(
            f"RayDP is not installed ({e}); install the Spark extra: "
            f"pip install 'storm-on-ray[spark]'") from e
    opens = java_add_opens()
    # Spark's Python workers must run this interpreter (a venv's), not whatever `python3`
    # is first on PATH, or every Python UDF / createDataFrame task fails to import pyspark.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.executorEnv.PYSPARK_PYTHON": os.environ["PYSPARK_PYTHON"],
        "spark.ray.raydp_app_master.extraJavaOptions": opens,
        "spark.executor.extraJavaOptions": opens,
        "spark.driver.extraJavaOptions": opens,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        **(configs or {}),
    }
    logger.info("starting Spark on Ray (RayDP): %d executor(s) x %d core(s), %s",
                num_executors, executor_cores, executor_memory)
    return raydp.init_spark(app_name=app_name, num_executors=num_executors,
                            executor_cores=executor_cores, executor_memory=executor_memory,
                            configs=conf, **kwargs)


def stop_spark(cleanup_data: bool = True) -> None:
    """Stop the RayDP Spark session (frees ``from_spark`` data unless ``cleanup_data=False``)."""
    import raydp

    raydp.stop_spark(cleanup_data=cleanup_data)
