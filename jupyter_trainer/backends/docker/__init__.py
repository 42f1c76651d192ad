"""Everything Docker: jobs in persistent containers, on this machine's engine or a remote one.

    declared.py      its options (DockerOptions, as a spec holds them), its entry, its run files;
                     read at %load_ext
    hosts.py         which engine (--docker-host, DOCKER_HOST, contexts), as the docker CLI chooses
    spec.py          Docker's part of a job's spec: the engine, a remote workdir, --sync
    clients.py       the engines' clients; every call to an engine goes through Clients.calling
    errors.py        the one place docker-py's and paramiko's errors become ours
    containers.py    finding and creating a job's container, and removing stopped ones
    runtime.py       what a job's record holds of its container
    backend.py       DockerBackend: launch, observe, stop, describe
    supervised.py    whether a job's supervisor runs in its container, what its files say
    restart_looks.py a look at a job run with --restarts whose container restarted
    in_container.py  sh snippets run by exec, files read from a container
    log_source.py    a log read through the engine; streamed_log.py, one stream per remote log
    links.py, store_mounts.py   the run's files in a container's own directory, and what may
                     not be mounted; sync.py, --sync
    usage.py         a container's CPU, memory and GPUs

Only this package imports docker-py; importing it imports nothing heavy (the backend is made
by the registry on first use).
"""
