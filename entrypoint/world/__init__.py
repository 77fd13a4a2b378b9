"""What reads the machine: NVML and sysfs (hardware.py), the host's files, ports, caches and plugins gathered
into Facts (host.py), the hubs' caches, the embedded model's download. Called from the commands, once."""
