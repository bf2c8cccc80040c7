"""The application file to hand spark-submit: runs the ``mploader`` command with the arguments after it.

``spark-submit [options] "$(python -c 'import mploader.cli.spark_submit as m; print(m.__file__)')" spark verify ...``:
importing this module runs nothing (unlike ``mploader.__main__``), so its path can be asked for, and the executors,
which import only the functions of their tasks (:mod:`mploader.spark.phase1`, :mod:`mploader.spark.phase2`), never
run the command.
"""

from __future__ import annotations

if __name__ == "__main__":
    from mploader.cli.main import command

    command()
