"""`raftka console`: a small read-only web console over the cluster (issue 22 item 4).

It is a client like any other: one `AdminClient` (and short-lived assigned `Consumer`s for the
message browser and lag in seconds) built from the user's client properties, so the cluster's
ACLs decide what it may see. Nothing here changes the cluster: the HTTP server answers GET and
HEAD only.

    data.py      gathers what each page shows, as plain dicts (also served as JSON)
    traffic.py   throughput and latency samples, from log end offsets polled over time
    views.py     dicts -> HTML, every user-controlled string escaped
    server.py    http.server in a thread + the client loop; routes and static files
"""
