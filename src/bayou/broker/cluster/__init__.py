"""Cluster mode: brokers coordinated through Apache ZooKeeper (kazoo), partition leaders and
followers, ISR, leader epochs, failover. Single-node mode never imports kazoo."""
