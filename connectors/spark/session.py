"""Spark on Ray (RayDP) with the JVM flags Java 17 needs: ``--add-opens`` for the packages
RayDP's JVMs reach into (JEP 403, "Strongly Encapsulate JDK Internals"; the list extends the
one Spark's launcher passes, Spark's ``JavaModuleOptions``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
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


#: The Log4j 2 file of Spark's JVMs when ``start_spark(quiet=True)``: WARN and above.
QUIET_LOG4J2 = Path(__file__).with_name("log4j2-quiet.properties")


def quiet_configs() -> dict[str, str]:
    """The Spark configs that ``start_spark(quiet=True)`` adds: no console progress bar
    (``spark.ui.showConsoleProgress``), and RayDP's app master JVM and the Spark driver's
    JVM logging WARN and above through :data:`QUIET_LOG4J2` instead of the Log4j files
    RayDP names (Ray's ``log4j2.xml`` at INFO for the app master, where Spark's listener
    then logged events at INFO; for the driver a file Log4j did not find, so it printed
    "Reconfiguration failed: No configuration found"). A key passed in ``configs`` wins
    over these."""
    return {
        "spark.ui.showConsoleProgress": "false",
        # RayDP's key for -Dlog4j2.configurationFile of the app master JVM it starts, which
        # is the Spark driver here
        "spark.ray.log4j.config.file.name": str(QUIET_LOG4J2),
        # RayDP's key for -Dlog4j2.configurationFile of the Spark driver's JVM (started in
        # this process by pyspark): RayDP's default names a file Log4j did not find, which
        # printed "Reconfiguration failed: No configuration found" at error level
        "spark.log4j.config.file.name": str(QUIET_LOG4J2),
    }


def start_spark(app_name: str = "storm-on-ray", num_executors: int = 1,
                executor_cores: int = 1, executor_memory: str = "1GB",
                configs: dict[str, str] | None = None, quiet: bool = True, **kwargs: Any):
    """Start a Spark session on Ray through RayDP, with the Java 17 flags; returns it.

    Ray must be initialised (``LocalCluster()`` does that). Slow (it starts Spark's JVMs),
    so start one and keep it: one Spark session per process is a RayDP rule;
    :func:`stop_spark` ends it.

    Args:
        app_name, num_executors, executor_cores, executor_memory: RayDP's ``init_spark``.
        configs: Spark configs; they win over the ones set here.
        quiet: no console progress bar and no INFO logs from Spark's JVMs
            (:func:`quiet_configs`); warnings and errors still print. ``False`` restores
            Spark's and RayDP's own settings, as does passing their keys in ``configs``.
        **kwargs: passed to ``raydp.init_spark``.

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
        **(quiet_configs() if quiet else {}),
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
