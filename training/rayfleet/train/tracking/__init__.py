"""What a run tells the people watching it, from the one process that reports (rank 0).

progress.py   a progress line at a steady cadence: step, loss, throughput, elapsed, remaining
events.py     TensorBoard event files in the run directory (local, or uploaded to s3://)
mlflow_run.py the run's one MLflow run (when a tracking URI is set), reused across restarts and resumes
scalars.py    the fan-out the jobs call: one `log(step, values)` to TensorBoard and MLflow
curves.py     the run's curves as a PNG (matplotlib, no server), one or several runs per figure
"""
