"""Broker security: the ACL authorizer (`authorizer`, `enforce`), per-listener addresses
(`endpoints`) and the broker's listener wiring (`setup`).

SASL mechanisms, TLS contexts, listener parsing and the socket edge are shared with the
controller and live in `common/` (`sasl`, `tls`, `listeners`, `listener_security`, `network`).
"""
