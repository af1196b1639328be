"""The data that crosses layers: timeline model (readers -> analysis) and report
(analysis -> renderers)."""
