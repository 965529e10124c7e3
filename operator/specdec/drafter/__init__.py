"""A draft that learns from its deployment's traffic: captured conversations (samples), their replay through a
hidden-state capture server, an EAGLE-3 head trained on the states and its offline evaluation against the
running draft."""
