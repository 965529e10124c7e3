"""What a deployment is refused for before anything runs: the checks (checks, memory) over the models' facts
(model_facts), which the fetch Job reads from a checkpoint's own files (checkpoint_facts) and the catalog lists
before any fetch (model_catalog), and over the GPU nodes a runtime pod can get (gpu_nodes)."""
