"""The speculation feedback loop (leader only): the runtime pods' metrics, scraped each window (monitor), turned
into measurements, the guard's verdict and the saveState capture's state (capture_watch), and fed back into the
deployment: draftLen: auto's decisions (autopilot), the draft lengths by load (load_schedules) and the restarts
of pods that stopped drafting (rearm). The reconciler reads what it concluded."""
