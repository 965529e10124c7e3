"""Monitoring the operator and its runtime pods: alert rules, a Grafana dashboard and, for the local cluster,
a real Prometheus; the chart ships what is generated here (`python -m specdec.observability`)."""
