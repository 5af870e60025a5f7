from r9700ctl.cli import main

main()
