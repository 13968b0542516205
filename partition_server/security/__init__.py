"""Broker security: SASL mechanisms, the ACL authorizer, TLS contexts and listener parsing.

Pure modules (`sasl`, `authorizer`, `listeners`) hold the decisions; `tls` builds stdlib `ssl`
contexts (and a dev CA); `common/network.py` is where they meet sockets.
"""
