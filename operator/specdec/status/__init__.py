"""Pure status evaluation, by subject: what observed Jobs, pods and Deployments mean for our resources.

- pods.py: a pod's conditions, and a container that will not start without a change.
- shared.py: an EngineBuild's or ModelCache's state (BuildState) from its Job and pods.
- deployment.py: a SpeculativeDeployment's conditions and phase, from one DeploymentInput.
- speculation.py: SpeculationEffective, SpeculationActive and status.speculation, from the monitor's measurement.
"""
